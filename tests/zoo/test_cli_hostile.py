"""Hostile command lines: huge numbers, runner-set or oversized --set values, deep JSON.

Each ends in exactly one line on stderr, exit code 2, no traceback and no
file written. Most run `zoo.cli.main` in-process; three run real processes:
two check that an argparse error neither imports TensorFlow nor prints its
start-up log, one that an error after TensorFlow has started is still one
line.
(The general bad-input matrix: tests/zoo/test_cli_bad_input.py.)
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import zoo
from tests.zoo.cli_harness import run_cli
from tests.zoo.cli_harness import snapshot
from zoo import cli
from zoo.run import flags

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def _train(*extra, model="bbb_mlp", dataset="yacht"):
    return ["train", model, "--dataset", dataset, "--epochs", "1", "--quiet", *extra]


def _set(text, model="bbb_mlp", dataset="yacht"):
    return _train("--set", text, model=model, dataset=dataset)


CASES = [
    # numbers past the flags' limits (zoo.run.flags.MAX_*)
    ("epochs_int64_max", _train("--epochs", "9223372036854775807"),
     "--epochs: must be at most 1,000,000"),
    ("epochs_in_float_notation", _train("--epochs", "1e3"), "--epochs: must be a positive int"),
    ("epochs_of_5000_digits", _train("--epochs", "9" * 5000), "5,000 characters"),
    ("batch_size_2_to_63", _train("--batch-size", "9223372036854775808"),
     "--batch-size: must be at most 1,048,576"),
    ("threads_100000", _train("--threads", "100000"), "--threads: must be at most 1,024"),
    ("split_2_to_32", _train("--split", "4294967296"), "--split: must be at most 10,000"),
    ("seed_2_to_32", _train("--seed", "4294967296"), f"--seed: must be at most {flags.MAX_SEED:,}"),
    ("checkpoint_seconds_inf", _train("--checkpoint-seconds", "inf"),
     "--checkpoint-seconds: must be a number of seconds from 0 to 86,400"),
    ("checkpoint_seconds_nan", _train("--checkpoint-seconds", "nan"), "got 'nan'"),
    ("checkpoint_seconds_a_week", _train("--checkpoint-seconds", "604800"), "got '604800'"),
    ("evaluate_samples_2_to_63", ["evaluate", "RUN", "--samples", str(2**63)],
     "--samples: must be at most 1,000,000"),
    ("main_job_epochs_10_to_7", ["--epochs", str(10**7)], "--epochs must be at most 1,000,000"),
    ("main_job_seed_2_to_32", ["--seed", str(2**32)], f"--seed must be at most {flags.MAX_SEED:,}"),
    # --set keys the runner sets: the message names the flag to use
    ("set_seed", _set("seed=5"), "seed is set by --seed, not by --set"),
    ("set_decay_steps_zero", _set("decay_steps=0"), "decay_steps is set by --epochs"),
    ("set_num_train", _set("num_train=3"), "num_train is set by --dataset and --split"),
    ("set_input_shape", _set("input_shape=[8]"), "input_shape is set by --dataset"),
    ("set_task", _set("task=classification"), "task is set by --dataset"),
    ("set_num_classes", _set("num_classes=3"), "num_classes is set by --dataset"),
    ("set_heteroscedastic", _set("heteroscedastic=true"), "the MODEL_heteroscedastic model"),
    ("set_epochs", _set("epochs=5"), "epochs is set by --epochs"),
    # --set keys and values refused while parsing
    ("set_key_twice", _train("--set", "learning_rate=0.1", "--set", "learning_rate=0.2"),
     "learning_rate is given twice"),
    ("set_empty_key", _set("=3"), "'' is not an argument name"),
    ("set_key_with_a_space", _set("hidden units=[8]"), "'hidden units' is not an argument"),
    ("set_null", _set("learning_rate=null"), "leave --set learning_rate out"),
    ("set_overflowing_float", _set("learning_rate=1e999"), "inf is not a finite number"),
    ("set_infinity", _set("learning_rate=-Infinity"), "-inf is not a finite number"),
    ("set_nan_in_a_list", _set("hidden_units=[8, NaN]"), "nan is not a finite number"),
    ("set_units_10_to_12", _set("hidden_units=[1000000000000]"),
     "`hidden_units` must be at most 65,536 per layer"),
    ("set_json_100000_deep", _set("hidden_units=" + "[" * 100_000 + "]" * 100_000),
     "nested more than 4 levels deep"),
    ("set_json_5_deep", _set("hidden_units=[[[[[8]]]]]"), "nested more than 4 levels deep"),
    ("set_1000_layers", _set("hidden_units=[" + ",".join(["8"] * 1000) + "]"),
     "at most 256 values in a list, got 1,000"),
    ("set_transformer_width_2_to_17",
     _set("width=131072", model="bayesian_transformer"), "`width` must be at most 65,536"),
    ("set_node_components_10_to_9", _set("num_components=1000000000", model="node_bnn"),
     "`num_components` must be at most 65,536"),
    # refused once the registry and the data are read, before anything is built
    ("set_key_of_another_model", _set("rate=0.1", model="flipout_mlp"),
     "Model 'flipout_mlp' has no argument 'rate'; its arguments: ['decay_steps'"),
    ("set_mlp_too_many_weights", _set("hidden_units=[60000, 60000]", model="flipout_mlp"),
     "would have about 3.6e+09 weights; the limit is 5e+07"),
    ("set_lenet_too_many_weights",
     _set("filters=[65536]", model="flipout_lenet", dataset="digits"),
     "flipout_lenet with input_shape (8, 8, 1)"),
    ("set_transformer_too_many_weights", _set("width=65536", model="bayesian_transformer"),
     "bayesian_transformer with 6 tokens, width 65536"),
    ("set_node_flows_too_many_weights",
     _train("--set", "num_components=8", "--set", "flow_length=65536", model="node_bnn"),
     "node_bnn_mlp_flow with input_shape (6,)"),
    # the benchmark's flags: one line, its --out untouched
    ("benchmark_splits_2_to_63", ["benchmark", "uci", "--dataset", "yacht", "--model",
                                  "bbb_mlp", "--splits", str(2**63)],
     "--splits: must be at most 10,000"),
    ("benchmark_classifier", ["benchmark", "uci", "--dataset", "yacht", "--model",
                              "flipout_lenet"], "is not a regression model"),
    # numbers as the data files write them: ASCII decimals (Python's float() and int()
    # take "1_0" and full-width digits); a negative value is the flag's, not an option
    ("budget_minutes_minus_inf", ["train", "auto", "--dataset", "yacht", "--budget-minutes",
                                  "-inf"],
     "--budget-minutes: must be a number of minutes above 0 and at most 10,080, got '-inf'"),
    ("budget_minutes_underscore", ["train", "auto", "--dataset", "yacht", "--budget-minutes",
                                   "1_0"], "--budget-minutes: must be a number of minutes, got "
                                           "'1_0'"),
    ("budget_minutes_full_width", ["train", "auto", "--dataset", "yacht", "--budget-minutes",
                                   "\uff11\uff10"], "--budget-minutes: must be a number of "
                                                    "minutes, got '\uff11\uff10'"),
    ("checkpoint_seconds_minus_1e3", _train("--checkpoint-seconds", "-1e3"),
     "--checkpoint-seconds: must be a number of seconds from 0 to 86,400, got '-1e3'"),
    ("epochs_underscore", _train("--epochs", "1_0"), "--epochs: must be a positive int, got "
                                                     "'1_0'"),
    ("seed_full_width", _train("--seed", "\uff17"), "--seed: must be a non-negative int"),
    ("main_job_epochs_underscore", ["--epochs", "1_0"], "--epochs: must be an int, got '1_0'"),
    # --budget-minutes is the search's: a named model does not search
    ("budget_minutes_for_a_named_model", _train("--budget-minutes", "5"),
     "--budget-minutes: only model 'auto' searches within a budget; 'bbb_mlp' trains"),
    ("benchmark_budget_for_a_named_model", ["benchmark", "uci", "--dataset", "yacht",
                                            "--model", "bbb_mlp", "--budget-minutes", "5"],
     "--budget-minutes: only --model auto searches within a budget"),
    ("budget_steps_for_a_named_model", _train("--budget-steps", "5000"),
     "--budget-steps: only model 'auto' searches within a budget; 'bbb_mlp' trains"),
    ("budget_steps_zero", ["train", "auto", "--dataset", "yacht", "--budget-steps", "0"],
     "--budget-steps: must be a positive int, got 0"),
    ("benchmark_budget_steps_float", ["benchmark", "uci", "--dataset", "yacht", "--model",
                                      "auto", "--budget-steps", "5e4"],
     "--budget-steps: must be a positive int, got '5e4'"),
    ("set_length_scale_squared_overflows", _set("length_scale=1e300", model="mc_dropout_mlp"),
     "`length_scale` must be a finite number > 0 whose square is finite"),
]


def test_there_are_at_least_twenty_cases():
    assert len(CASES) >= 20 and len({case[0] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("argv, message", [case[1:] for case in CASES],
                         ids=[case[0] for case in CASES])
def test_hostile_input_is_one_line_exit_2_and_leaves_nothing(argv, message, tmp_path, capsys,
                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)  # a default --out would land here
    argv = [str(tmp_path / "run") if arg == "RUN" else arg for arg in argv]
    if argv[0] == "train":
        argv = argv + ["--out", str(tmp_path / "run")]
    before = snapshot(tmp_path)
    code = run_cli(argv)
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert code == 2, captured.err
    assert len(lines) == 1 and lines[0].startswith("python -m zoo"), captured.err
    assert " error: " in lines[0] and message in lines[0], lines[0]
    assert len(lines[0]) < 400, lines[0]  # a hostile value does not flood the line
    assert "Traceback" not in captured.err
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("error, message", [
    (MemoryError(), "out of memory (MemoryError: MemoryError)"),
    (RecursionError("maximum recursion depth exceeded"), "input nested too deeply"),
    (OverflowError("(34, 'Numerical result out of range')"), "a number is too large"),
])
def test_resource_errors_become_one_line(error, message, capsys, monkeypatch):
    def fails(args):
        raise error

    monkeypatch.setattr(cli, "_train", fails)
    assert cli.main(["train", "bbb_mlp", "--dataset", "yacht"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_tensorflow_out_of_memory_names_the_tensor(capsys, monkeypatch):
    import tensorflow as tf  # noqa: PLC0415

    def fails(args):
        raise tf.errors.ResourceExhaustedError(
            None, None, "{{function_node __wrapped__StatelessRandomUniformV2}} OOM when "
            "allocating tensor with shape[8,1099511627776] and type float on CPU " + "x" * 500)

    monkeypatch.setattr(cli, "_train", fails)
    assert cli.main(["train", "bbb_mlp", "--dataset", "yacht"]) == 2
    err = capsys.readouterr().err
    assert err == ("python -m zoo train: error: out of memory (OOM when allocating tensor with "
                   "shape[8,1099511627776]); use a smaller --batch-size or layers\n")


def test_other_errors_keep_their_traceback(monkeypatch):
    def fails(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "_train", fails)
    with pytest.raises(RuntimeError, match="a bug"):
        cli.main(["train", "bbb_mlp", "--dataset", "yacht"])


def test_zoo_names_load_on_first_use():
    assert zoo.build_model is zoo.models.registry.build_model
    from zoo import MODELS  # noqa: PLC0415

    assert "bbb_mlp" in MODELS and "build_model" in dir(zoo)
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        zoo.nope  # noqa: B018


def _env():
    path = [str(REPO_ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH")
                               else [])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    env.pop("TF_CPP_MIN_LOG_LEVEL", None)  # the CLI must silence TensorFlow itself
    return env


def _run(args, cwd):
    return subprocess.run([sys.executable, *args], cwd=cwd, env=_env(), capture_output=True,
                          text=True, timeout=300)


def test_an_argparse_error_does_not_import_tensorflow(tmp_path):
    script = ("import sys\nfrom zoo import cli\ntry:\n    cli.main(sys.argv[1:])\n"
              "except SystemExit as exit_info:\n    code = exit_info.code\n"
              "print(sorted(m for m in ('tensorflow', 'keras', 'tfp_bnn', 'zoo.models.registry')"
              " if m in sys.modules))\nsys.exit(code)\n")
    result = _run(["-c", script, *_train("--epochs", "many")], tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
    assert result.stderr.splitlines() == [
        "python -m zoo train: error: argument --epochs: must be a positive int, got 'many' "
        "(see python -m zoo train --help)"]


def test_a_huge_epochs_in_a_real_process_is_one_line(tmp_path):
    result = _run(["-m", "zoo", *_train("--epochs", "9223372036854775807",
                                        "--out", str(tmp_path / "run"))], REPO_ROOT)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        "python -m zoo train: error: argument --epochs: must be at most 1,000,000, got "
        "9223372036854775807 (see python -m zoo train --help)"]
    assert not (tmp_path / "run").exists()


def test_an_error_after_tensorflow_started_is_still_one_line(tmp_path):
    # No TensorFlow log line (absl, oneDNN, CUDA) before our own.
    result = _run(["-m", "zoo", *_set("hidden_units=[60000, 60000]", model="flipout_mlp"),
                   "--out", str(tmp_path / "run")], REPO_ROOT)
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and "would have about 3.6e+09 weights" in lines[0], result.stderr
    assert not (tmp_path / "run").exists()


# --- names that are not UTF-8 (bytes kept as lone surrogates, PEP 383) -------

NOT_UTF8 = os.fsdecode(b"y\xffacht")


def test_an_out_that_is_not_utf8_is_refused_before_training(tmp_path, capsys):
    # TensorFlow's SavedModel writer takes only UTF-8 paths: the run trained,
    # then failed at the export, and so did every rerun.
    out = os.path.join(str(tmp_path), NOT_UTF8)
    assert run_cli(_train("--out", out)) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        f"python -m zoo train: error: --out '{tmp_path}/y\\xffacht' is not a UTF-8 name; "
        "TensorFlow writes the model's files only under UTF-8 paths: choose another --out."]
    assert os.listdir(tmp_path) == []


def test_a_dataset_directory_that_is_not_utf8_trains_and_evaluates(tmp_path, capsys):
    # The name went into the plot titles, where matplotlib's font refused it
    # after training (exit 1, a traceback, the checkpoint left behind).
    data = os.path.join(str(tmp_path), NOT_UTF8)
    shutil.copytree(REPO_ROOT / "tfp_bnn" / "data" / "uci_sets" / "yacht", data)
    out = tmp_path / "run"
    assert run_cli(_train("--samples", "3", "--out", str(out), dataset=data)) == 0
    results = json.loads((out / "results.json").read_text(encoding="utf-8"))
    assert results["dataset"] == "y\\xffacht"
    assert not (out / ".backup").exists()
    assert run_cli(["evaluate", str(out), "--samples", "3"]) == 0
    assert "Traceback" not in capsys.readouterr().err
