"""tf.distribute for the zoo: pick a strategy, find the chief, back up training.

Three strategies, by name: "default" (no distribution), "mirrored" (every
local device of this process) and "multiworker" (synchronous data parallel
training over several processes or machines, described by the TF_CONFIG
environment variable).

What Keras 3 (3.15, TensorFlow backend) does under
`tf.distribute.MultiWorkerMirroredStrategy`, checked with two local workers:

- `fit` on NumPy arrays: the array adapter batches with the *global*
  `batch_size` and sets DATA auto-sharding, so every worker takes its share
  of each global batch (batch_size / num_workers rows). Seed every worker the
  same (`keras.utils.set_random_seed(seed)`): the shuffled order is drawn on
  each worker, and only identical orders make the shares a partition of the
  data. `tf.data` datasets are sharded by tf.distribute's AUTO policy, which
  falls back from FILE to DATA with a warning; `with_data_sharding` sets
  DATA up front.
- Out of the box `fit` fails: Keras reduces a nested data batch and scalar
  logs with `strategy.reduce`, which MultiWorkerMirroredStrategy supports
  for neither (keras-team/keras#20585). The strategy built here fixes
  `reduce`; see `_KerasMultiWorkerMirroredStrategy`.
- `keras.callbacks.BackupAndRestore` (and `backup_callback`'s subclass)
  works when every worker backs up into its own directory (each writes the
  same weights; two writers of one file would race). A restarted run
  resumes from the saved epoch. The chief owns the run directory (its
  marker and lock, see `zoo.run.run_dir`); the others work in `out/.workers`.
- The KL terms (each layer's weight regularizer) count once: Keras divides
  them by the number of replicas and the gradients are summed over replicas.

Example:
The steps of a run, here under the default strategy (one process, the
chief); each worker of a cluster runs the same lines with
`strategy_for("multiworker")`, the first TensorFlow work in its process:

>>> import tempfile, zoo
>>> strategy = strategy_for("default")
>>> keras.utils.set_random_seed(0)              # the same seed on every worker
>>> with strategy.scope():
...     model = zoo.build_model("mc_dropout_mlp", (3,), num_train=32, hidden_units=(8,))
>>> out = tempfile.mkdtemp()
>>> workdir = worker_directory(out, strategy)   # `out` itself on the chief
>>> x, y = np.random.rand(32, 3), np.random.rand(32)
>>> history = model.fit(x, y, batch_size=32, epochs=1, verbose=0,
...                     callbacks=[backup_callback(out, strategy)])
>>> model.save(os.path.join(workdir, "model.keras"))   # every worker saves
>>> finish(out, workdir, strategy)              # drops a non-chief's files
>>> os.listdir(out)
['model.keras']
"""

import dataclasses
import json
import os
import shutil

from tfp_bnn._tf import tf

from tfp_bnn.callbacks import AtomicBackupAndRestore

STRATEGIES = ("default", "mirrored", "multiworker")
# Job names MultiWorkerMirroredStrategy trains with ("ps" is another
# strategy's; an "evaluator" runs outside the collective).
TRAINING_JOBS = ("chief", "worker")
BACKUP = ".backup"
WORKERS = ".workers"


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """This process's place in a cluster, as TF_CONFIG describes it.

    Attributes:
        cluster: job name -> tuple of "host:port" addresses.
        task_type: this task's job name ("chief" or "worker").
        task_index: this task's index within its job.
    """

    cluster: dict
    task_type: str
    task_index: int

    @property
    def num_workers(self) -> int:
        """Processes that train: chief plus workers."""
        return sum(len(self.cluster.get(job, ())) for job in TRAINING_JOBS)

    @property
    def is_chief(self) -> bool:
        return chief_task(self.task_type, self.task_index, self.cluster)


def chief_task(task_type, task_index, jobs) -> bool:
    """Whether task (`task_type`, `task_index`) is the chief of a cluster with `jobs`.

    The "chief" task if the cluster has one, else worker 0: the convention
    of TensorFlow's multi-worker training.
    """
    if task_type == "chief":
        return True
    return task_type == "worker" and task_index == 0 and "chief" not in jobs


def _check_address(job, address):
    host, colon, port = address.rpartition(":") if isinstance(address, str) else ("", "", "")
    if not (host and colon and port.isdigit()):
        raise ValueError(f"TF_CONFIG: cluster[{job!r}] holds {address!r}, not a "
                         "'host:port' address string.")


def parse_tf_config(text) -> TaskSpec:
    """Parses and checks a TF_CONFIG value for multi-worker training.

    Args:
        text: the value of the TF_CONFIG environment variable (None if
            unset), e.g. '{"cluster": {"worker": ["host1:2222",
            "host2:2222"]}, "task": {"type": "worker", "index": 0}}'.

    Returns:
        A `TaskSpec`.

    Raises:
        ValueError: naming TF_CONFIG and what is wrong with it: unset or
            empty, not JSON, no `cluster` of "chief"/"worker" address lists,
            more than one chief, no `task` with a `type` in the cluster and an
            int `index` in range.
    """
    if text is None or not str(text).strip():
        raise ValueError("The 'multiworker' strategy needs the TF_CONFIG environment "
                         "variable, which is unset or empty; set it on every worker to "
                         '{"cluster": {"worker": ["host:port", ...]}, '
                         '"task": {"type": "worker", "index": i}}.')
    try:
        config = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}): {text!r}.") from None
    if not isinstance(config, dict):
        raise ValueError(f"TF_CONFIG must be a JSON object, got {type(config).__name__}.")
    cluster = config.get("cluster")
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError('TF_CONFIG needs a "cluster" object mapping job names to address '
                         f"lists, got {cluster!r}.")
    unsupported = sorted(set(cluster) - set(TRAINING_JOBS))
    if unsupported:
        raise ValueError(f"TF_CONFIG: cluster jobs {unsupported} are not supported by "
                         f"multi-worker training; use only {list(TRAINING_JOBS)}.")
    parsed = {}
    for job, addresses in cluster.items():
        if not isinstance(addresses, list) or not addresses:
            raise ValueError(f"TF_CONFIG: cluster[{job!r}] must be a non-empty list of "
                             f"'host:port' strings, got {addresses!r}.")
        for address in addresses:
            _check_address(job, address)
        parsed[job] = tuple(addresses)
    if len(parsed.get("chief", ())) > 1:
        raise ValueError(f"TF_CONFIG: cluster['chief'] must hold one address, got "
                         f"{len(parsed['chief'])}.")
    task = config.get("task")
    if not isinstance(task, dict):
        raise ValueError('TF_CONFIG needs a "task" object with "type" and "index", '
                         f"got {task!r}.")
    task_type, index = task.get("type"), task.get("index")
    if task_type not in parsed:
        raise ValueError(f"TF_CONFIG: task type {task_type!r} is not a job of the cluster "
                         f"{sorted(parsed)}.")
    if isinstance(index, bool) or not isinstance(index, int):
        raise ValueError(f"TF_CONFIG: task index must be an int, got {index!r}.")
    if not 0 <= index < len(parsed[task_type]):
        raise ValueError(f"TF_CONFIG: task index {index} is out of range for job "
                         f"{task_type!r} with {len(parsed[task_type])} address(es).")
    return TaskSpec(cluster=parsed, task_type=task_type, task_index=index)


class _KerasMultiWorkerMirroredStrategy(tf.distribute.MultiWorkerMirroredStrategy):
    """MultiWorkerMirroredStrategy whose `reduce` takes what Keras 3 passes.

    Keras 3's `fit` reduces (a) a whole nested data batch with axis=None
    before building the model and (b) every scalar log with axis=0. The
    stock strategy accepts neither a nest (TensorFlow's own TODO in
    `Strategy.reduce`) nor axis=0 on a scalar, so `fit` fails on its first
    step (keras-team/keras#20585). Here a nest is reduced leaf by leaf, and
    a per-replica scalar is reduced across replicas only: the mean of the
    replicas' scalars, which is what MirroredStrategy yields in the same
    place. (`axis` gets a default because Keras' "sum" reduction omits it.)
    """

    def reduce(self, reduce_op, value, axis=None):
        def reduce_one(leaf):
            local = leaf.values[0] if isinstance(leaf, tf.distribute.DistributedValues) else leaf
            shape = getattr(local, "shape", ())
            rank = shape.rank if isinstance(shape, tf.TensorShape) else len(shape)
            leaf_axis = None if axis is not None and rank == 0 else axis
            return super(_KerasMultiWorkerMirroredStrategy, self).reduce(
                reduce_op, leaf, leaf_axis)

        return tf.nest.map_structure(reduce_one, value)


def strategy_for(name):
    """The `tf.distribute.Strategy` called `name`.

    Call it before any other TensorFlow op in the process: a multi-worker
    strategy configures collective ops, which TensorFlow only allows before
    its runtime starts (importing tensorflow, keras and tfp_bnn is fine;
    creating a tensor is not). Whether the runtime has started cannot be
    asked in advance, so the late case is reported by the RuntimeError
    TensorFlow raises. Create one strategy per process.

    Args:
        name: "default" (`tf.distribute.get_strategy()`), "mirrored"
            (`MirroredStrategy` over all local devices; one CPU is fine) or
            "multiworker" (`MultiWorkerMirroredStrategy` from TF_CONFIG; the
            call blocks until every worker of the cluster has started).

    Returns:
        The strategy.

    Raises:
        ValueError: for an unknown name, or for "multiworker" with a missing
            or malformed TF_CONFIG (see `parse_tf_config`).
        RuntimeError: for "multiworker" after TensorFlow's runtime started.

    Example:
    >>> import zoo
    >>> strategy = strategy_for("mirrored")   # every local device, here the CPU
    >>> with strategy.scope():
    ...     model = zoo.get_model("bbb_mlp")((8,), num_train=927)
    >>> strategy.num_replicas_in_sync >= 1
    True
    """
    if name not in STRATEGIES:
        raise ValueError(f"Unknown strategy {name!r}; choose one of {list(STRATEGIES)}.")
    if name == "default":
        return tf.distribute.get_strategy()
    if name == "mirrored":
        return tf.distribute.MirroredStrategy()
    parse_tf_config(os.environ.get("TF_CONFIG"))
    try:
        return _KerasMultiWorkerMirroredStrategy()
    except RuntimeError as error:
        if "program startup" not in str(error):
            raise
        raise RuntimeError("strategy_for('multiworker') must run before any other TensorFlow "
                           "op in the process (TensorFlow: 'Collective ops must be configured "
                           "at program startup'); create the strategy first.") from error


def _task(strategy):
    """(task type, task index, job names), or None outside a multi-worker cluster."""
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not resolver.task_type:
        return None
    return resolver.task_type, int(resolver.task_id or 0), set(resolver.cluster_spec().jobs)


def is_chief(strategy) -> bool:
    """Whether this process writes the results of a run under `strategy`.

    True for a strategy without a cluster (default, mirrored); under a
    multi-worker strategy, True for the "chief" task, or for worker 0 when
    the cluster has no chief.

    Args:
        strategy: a `tf.distribute.Strategy`.

    Returns:
        A bool.

    Example:
    >>> is_chief(tf.distribute.get_strategy())   # no cluster: this process writes
    True
    """
    task = _task(strategy)
    return task is None or chief_task(*task)


def worker_directory(out, strategy):
    """The directory this process may write a run's files into; created.

    The chief writes into `out`. Every other worker must still write (Keras
    and TensorFlow expect all workers to take part in saving, and each backs
    up its own training state), into `out/.workers/<type>_<index>`: a fixed
    place, so a restarted worker finds its backup, and one that `finish`
    deletes at the end. Given that directory itself as `out`, returns it.

    Args:
        out: the run directory.
        strategy: the strategy the run trains under.

    Returns:
        The absolute path of this process' directory.

    Example:
    >>> import tempfile
    >>> out = os.path.join(tempfile.mkdtemp(), "a")
    >>> worker_directory(out, tf.distribute.get_strategy()) == out   # `out` on the chief
    True
    """
    directory = worker_path(out, strategy)
    os.makedirs(directory, exist_ok=True)
    return directory


def worker_path(out, strategy):
    """The path `worker_directory` returns, without creating anything."""
    out = os.path.abspath(os.fspath(out))
    task = _task(strategy)
    if task is None or chief_task(*task):
        return out
    name = f"{task[0]}_{task[1]}"
    if os.path.basename(out) == name and os.path.basename(os.path.dirname(out)) == WORKERS:
        return out
    return os.path.join(out, WORKERS, name)


def backup_callback(out, strategy, fingerprint=None, delete_checkpoint=True, save_interval=0.0,
                    shared_files=()):
    """A checkpoint callback into this worker's `<dir>/.backup`.

    A `tfp_bnn.callbacks.AtomicBackupAndRestore` (Keras' BackupAndRestore
    with checkpoints a kill cannot corrupt): it saves the weights, optimizer
    and noise-generator state, the epoch and the logs so far at every epoch
    end; a `fit` started again after a crash resumes at the saved epoch.
    Under MultiWorkerMirroredStrategy every worker saves and restores its own
    copy, in its `worker_directory`, so no two processes write one file (the
    copies are equal: the weights are synchronised). Restart all workers
    together; a worker killed between the others' saves would resume one
    epoch apart from them. With `tfp_bnn.data.shuffled_epochs` as the data,
    the resumed run repeats the uninterrupted run's batches and noise.

    Args:
        out: the run directory (or this worker's directory).
        strategy: the strategy `fit` runs under.
        fingerprint: JSON-able run description; a checkpoint of another run
            is refused (see AtomicBackupAndRestore).
        delete_checkpoint: delete it when `fit` completes.
        save_interval: minimum seconds between saves (0: every epoch end).
        shared_files: the caller's file names kept beside the checkpoint.

    Returns:
        A `tfp_bnn.callbacks.AtomicBackupAndRestore`.

    Example:
    >>> import tempfile
    >>> callback = backup_callback(tempfile.mkdtemp(), tf.distribute.get_strategy())
    >>> os.path.basename(callback.backup_dir)
    '.backup'
    """
    return AtomicBackupAndRestore(os.path.join(worker_directory(out, strategy), BACKUP),
                                  fingerprint=fingerprint,
                                  delete_checkpoint=delete_checkpoint,
                                  save_interval=save_interval, shared_files=shared_files)


def finish(out, directory, strategy):
    """Deletes a non-chief worker's `directory` under `out/.workers`.

    A no-op on the chief, whose directory is `out`. Removes `out/.workers`
    too once it is empty (the last worker to finish does).
    """
    if is_chief(strategy):
        return
    workers = os.path.join(os.path.abspath(os.fspath(out)), WORKERS)
    directory = os.path.abspath(os.fspath(directory))
    if os.path.dirname(directory) != workers:
        raise ValueError(f"{directory!r} is not a worker directory under {workers!r}; "
                         "refusing to delete it.")
    shutil.rmtree(directory, ignore_errors=True)
    try:
        os.rmdir(workers)
    except OSError:  # another worker's directory is still there
        pass


def with_data_sharding(dataset):
    """`dataset` with DATA auto-sharding, for `fit` under a multi-worker strategy.

    An in-memory `tf.data` pipeline has no files to shard, so tf.distribute's
    AUTO policy tries FILE, warns and falls back to DATA; this sets DATA up
    front. Batch with the global batch size. NumPy inputs to `fit` need
    nothing: Keras sets DATA itself.

    Args:
        dataset: a `tf.data.Dataset`.

    Returns:
        The dataset with the DATA auto-shard policy.

    Example:
    >>> x, y = np.random.rand(128, 3), np.random.rand(128)
    >>> data = tf.data.Dataset.from_tensor_slices((x, y)).batch(64)
    >>> sharded = with_data_sharding(data)
    >>> sharded.options().experimental_distribute.auto_shard_policy.name
    'DATA'
    """
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return dataset.with_options(options)
