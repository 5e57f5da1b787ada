"""zoo.run.distribute: TF_CONFIG checks, the chief, worker directories, and real
2-process MultiWorkerMirroredStrategy training on localhost."""

import json
import math
import os
import socket
import subprocess
import sys
import time
import types

import pytest
import tensorflow as tf

from zoo.run import distribute

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_multiworker_worker.py")
TIMEOUT = 300


def _tf_config(cluster, task_type, index):
    return json.dumps({"cluster": cluster, "task": {"type": task_type, "index": index}})


# --- TF_CONFIG parsing -------------------------------------------------------

def test_parse_tf_config_reads_cluster_and_task():
    spec = distribute.parse_tf_config(
        _tf_config({"chief": ["a:1"], "worker": ["b:2", "c:3"]}, "worker", 1))
    assert spec.cluster == {"chief": ("a:1",), "worker": ("b:2", "c:3")}
    assert (spec.task_type, spec.task_index, spec.num_workers) == ("worker", 1, 3)
    assert not spec.is_chief


@pytest.mark.parametrize("text, message", [
    (None, "unset or empty"),
    ("  ", "unset or empty"),
    ("{cluster:", "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"task": {"type": "worker", "index": 0}}', '"cluster"'),
    (_tf_config({"worker": "a:1"}, "worker", 0), "non-empty list"),
    (_tf_config({"worker": []}, "worker", 0), "non-empty list"),
    (_tf_config({"worker": ["a"]}, "worker", 0), "'host:port'"),
    (_tf_config({"worker": ["a:x"]}, "worker", 0), "'host:port'"),
    (_tf_config({"worker": ["a:1"], "ps": ["b:2"]}, "worker", 0), "['ps']"),
    (_tf_config({"chief": ["a:1", "b:2"]}, "chief", 0), "one address"),
    ('{"cluster": {"worker": ["a:1"]}}', '"task"'),
    (_tf_config({"worker": ["a:1"]}, "chief", 0), "not a job"),
    (_tf_config({"worker": ["a:1"]}, "worker", "0"), "must be an int"),
    (_tf_config({"worker": ["a:1"]}, "worker", True), "must be an int"),
    (_tf_config({"worker": ["a:1", "b:2"]}, "worker", 2), "out of range"),
    (_tf_config({"worker": ["a:1"]}, "worker", -1), "out of range"),
])
def test_parse_tf_config_names_what_is_wrong(text, message):
    with pytest.raises(ValueError, match="TF_CONFIG") as error:
        distribute.parse_tf_config(text)
    assert message in str(error.value)


@pytest.mark.parametrize("jobs, task_type, index, expected", [
    ({"worker": 2}, "worker", 0, True),
    ({"worker": 2}, "worker", 1, False),
    ({"chief": 1, "worker": 2}, "chief", 0, True),
    ({"chief": 1, "worker": 2}, "worker", 0, False),
])
def test_chief_is_the_chief_task_or_else_worker_zero(jobs, task_type, index, expected):
    cluster = {job: [f"h{job}{i}:1" for i in range(n)] for job, n in jobs.items()}
    spec = distribute.parse_tf_config(_tf_config(cluster, task_type, index))
    assert spec.is_chief is expected
    assert distribute.is_chief(_FakeStrategy(cluster, task_type, index)) is expected


# --- strategy_for ------------------------------------------------------------

def test_strategy_for_default_and_unknown_names():
    assert distribute.strategy_for("default") is tf.distribute.get_strategy()
    with pytest.raises(ValueError, match=r"'default', 'mirrored', 'multiworker'"):
        distribute.strategy_for("tpu")


def test_multiworker_without_tf_config_names_it(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="TF_CONFIG"):
        distribute.strategy_for("multiworker")
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {}}')
    with pytest.raises(ValueError, match='TF_CONFIG needs a "cluster"'):
        distribute.strategy_for("multiworker")


def test_multiworker_after_tensorflow_started_says_create_it_first(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", _tf_config(
        {"worker": [f"localhost:{_free_ports(1)[0]}"]}, "worker", 0))
    tf.constant(0.0)  # the runtime is running from here on
    with pytest.raises(RuntimeError, match="before any other TensorFlow op"):
        distribute.strategy_for("multiworker")


# --- directories -------------------------------------------------------------

class _FakeStrategy:
    """Quacks like a multi-worker strategy for the directory functions."""

    def __init__(self, cluster, task_type, index):
        spec = tf.train.ClusterSpec(cluster)
        self.cluster_resolver = types.SimpleNamespace(
            task_type=task_type, task_id=index, cluster_spec=lambda: spec)


def test_worker_directory_chief_writes_out_others_a_private_directory(tmp_path):
    out = tmp_path / "run"
    cluster = {"worker": ["a:1", "b:2"]}
    chief, other = _FakeStrategy(cluster, "worker", 0), _FakeStrategy(cluster, "worker", 1)
    default = tf.distribute.get_strategy()
    assert distribute.is_chief(default)
    assert distribute.worker_directory(out, default) == str(out)
    assert distribute.worker_directory(out, chief) == str(out)
    private = distribute.worker_directory(out, other)
    assert private == str(out / ".workers" / "worker_1") and os.path.isdir(private)
    # Given its own directory, a worker keeps it (the runner passes it on).
    assert distribute.worker_directory(private, other) == private
    backup = distribute.backup_callback(private, other)
    assert backup.backup_dir == os.path.join(private, ".backup")
    assert distribute.backup_callback(out, chief).backup_dir == str(out / ".backup")

    (out / ".workers" / "worker_1" / "model.keras").write_text("x")
    distribute.finish(out, str(out), chief)  # the chief's directory stays
    assert (out / ".workers").is_dir()
    with pytest.raises(ValueError, match="refusing"):
        distribute.finish(out, str(out), other)
    distribute.finish(out, private, other)
    assert os.listdir(out) == []


def test_with_data_sharding_sets_data_policy():
    data = distribute.with_data_sharding(tf.data.Dataset.range(4).batch(2))
    policy = data.options().experimental_distribute.auto_shard_policy
    assert policy == tf.data.experimental.AutoShardPolicy.DATA


# --- two real workers --------------------------------------------------------

def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for sock in sockets:
        sock.bind(("localhost", 0))
    ports = [sock.getsockname()[1] for sock in sockets]
    for sock in sockets:
        sock.close()
    return ports


def _run_workers(commands, cluster, tasks, logs, timeout=TIMEOUT, all_fail=False):
    """Runs one process per (command, task) with its TF_CONFIG.

    Returns [(returncode, stdout, stderr)]. Kills every process when one
    fails or the time is up: the others would wait for it forever. With
    `all_fail` (every process is meant to fail at the same point), waits
    for all of them instead, so none is killed while writing its backup.
    """
    processes, streams = [], []
    for number, (command, (task_type, index)) in enumerate(zip(commands, tasks)):
        env = dict(os.environ, TF_CONFIG=_tf_config(cluster, task_type, index),
                   TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=ROOT, CUDA_VISIBLE_DEVICES="",
                   TF_NUM_INTEROP_THREADS="1", TF_NUM_INTRAOP_THREADS="1")
        stdout = open(logs / f"{number}.out", "w+", encoding="utf-8")  # noqa: SIM115
        stderr = open(logs / f"{number}.err", "w+", encoding="utf-8")  # noqa: SIM115
        streams.append((stdout, stderr))
        processes.append(subprocess.Popen(command, cwd=ROOT, env=env, stdout=stdout,
                                          stderr=stderr))
    deadline = time.monotonic() + timeout
    try:
        while any(p.poll() is None for p in processes):
            failed = not all_fail and any(p.poll() not in (None, 0) for p in processes)
            if failed or time.monotonic() > deadline:
                break
            time.sleep(0.5)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
    results = []
    for process, (stdout, stderr) in zip(processes, streams):
        stdout.seek(0)
        stderr.seek(0)
        results.append((process.returncode, stdout.read(), stderr.read()))
        stdout.close()
        stderr.close()
    return results


def _report(results):
    return "\n".join(f"--- process {i} exit {code}\nstdout:\n{out[-2000:]}\n"
                     f"stderr:\n{err[-4000:]}" for i, (code, out, err) in enumerate(results))


def _lines(stdout, tag):
    return [line.split()[1:] for line in stdout.splitlines() if line.startswith(tag + " ")]


def _script(out, epochs, crash_at=None):
    command = [sys.executable, WORKER_SCRIPT, str(out), str(epochs)]
    return command + ([str(crash_at)] if crash_at is not None else [])


@pytest.mark.slow
def test_two_workers_train_in_sync_and_restarted_workers_resume_from_the_backup(tmp_path):
    # One 2-process run that crashes, then the restarted run: every property
    # of a fresh run is checked on one of the two (each pair of processes
    # costs two TensorFlow start-ups).
    out = tmp_path / "run"
    cluster = {"chief": [f"localhost:{_free_ports(1)[0]}"],
               "worker": [f"localhost:{_free_ports(1)[0]}"]}
    tasks = [("chief", 0), ("worker", 0)]
    crashed = _run_workers([_script(out, 4, crash_at=2)] * 2, cluster, tasks, tmp_path,
                           all_fail=True)
    assert all(code != 0 and "planned crash at epoch 2" in err for code, _, err in crashed), \
        _report(crashed)
    assert (out / ".backup" / "state.json").exists()
    assert (out / ".workers" / "worker_0" / ".backup" / "state.json").exists()
    epochs = [_lines(stdout, "EPOCH") for _, stdout, _ in crashed]
    # In sync: both saw epochs 0 and 1 with the same (all-reduced) losses.
    assert epochs[0] == epochs[1] and [e for e, _ in epochs[0]] == ["0", "1"], \
        _report(crashed)
    first_loss = float(epochs[0][0][1])
    assert float(epochs[0][1][1]) < first_loss

    cluster = {job: [f"localhost:{_free_ports(1)[0]}"] for job in cluster}
    resumed = _run_workers([_script(out, 4)] * 2, cluster, tasks, tmp_path)
    assert all(code == 0 for code, _, _ in resumed), _report(resumed)
    for _, stdout, _ in resumed:
        assert [epoch for epoch, _ in _lines(stdout, "EPOCH")] == ["2", "3"], stdout
    digests = [_lines(stdout, "DIGEST") for _, stdout, _ in resumed]
    assert digests[0] == digests[1] and len(digests[0]) == 1, _report(resumed)
    # Only the chief keeps files; the backups and the worker's directory are gone.
    assert sorted(os.listdir(out)) == ["model.keras", "result.json"]
    result = json.loads((out / "result.json").read_text())
    assert result["num_replicas"] == 2 and result["epochs"] == [2, 3]
    assert result["digest"] == digests[0][0][0]
    losses = result["history"]["loss"]
    assert all(math.isfinite(v) for v in losses)
    # Restored weights, not a fresh start: already below the first epoch's loss.
    assert losses[0] < 0.8 * first_loss
    # The KL is counted once over the two workers, not once per worker.
    assert result["history"]["kl"][-1] == pytest.approx(result["exact_kl"], rel=0.05)


@pytest.mark.slow
def test_cli_trains_with_two_workers(tmp_path):
    out = tmp_path / "run"
    cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
    # Two epochs and 10 Monte Carlo samples: what is checked here (the files
    # the chief keeps, one history entry per epoch, finite scores) does not
    # depend on how many; both workers train every epoch and score the model.
    command = [sys.executable, "-m", "zoo", "train", "bbb_mlp", "--dataset", "concrete",
               "--epochs", "2", "--samples", "10", "--strategy", "multiworker",
               "--out", str(out), "--quiet"]
    results = _run_workers([command] * 2, cluster, [("worker", 0), ("worker", 1)], tmp_path)
    assert all(code == 0 for code, _, _ in results), _report(results)
    assert not (out / ".workers").exists() and not (out / ".backup").exists()
    assert not (out / ".staging").exists()
    for name in ("config.json", "history.json", "model.keras", "saved_model"):
        assert (out / name).exists(), sorted(os.listdir(out))
    history = json.loads((out / "history.json").read_text())
    assert len(history["loss"]) == 2 and all(math.isfinite(v) for v in history["loss"])
    results_json = json.loads((out / "results.json").read_text())
    assert math.isfinite(results_json["rmse"]) and results_json["epochs"] == 2
    assert results_json["num_samples"] == 10
    config = json.loads((out / "config.json").read_text())
    assert config["strategy"] == "multiworker"
