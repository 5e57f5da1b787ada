"""What a resumed run must share with the run it continues, to end bit-identical.

A checkpoint (`.backup/`) is resumed only by a run with the same fingerprint:
the arguments that shape training, a hash of the data, the TensorFlow thread
settings (several threads sum in varying order) and the library versions.
"""

import hashlib
import platform

import keras
import numpy as np

import tfp_bnn
from zoo.run import datasets


def set_threads(threads, strict=True):
    """Runs TensorFlow ops on `threads` CPU threads (0: TensorFlow's default).

    With one thread a run is bit-for-bit reproducible on CPU: the same seed
    gives the same history, weights and metrics. With several, TensorFlow
    schedules ops and their shards over a thread pool, and sums can come out
    in another order: runs then differ in the last bits of float32, which
    training amplifies a little (measured on bbb_mlp/concrete, 20 epochs:
    two runs out of four differed, by ~1e-7 in the loss). The zoo's models
    are small, so one thread costs little (bbb_mlp 15 epochs 7 s with all
    threads against 10.6 s with one, flipout_lenet 25.6 s against 23.9 s;
    2 cores). Takes effect only before TensorFlow's first op.

    Args:
        threads: int >= 0.
        strict: if TensorFlow has started already with other settings,
            raise ValueError (True) or keep them and return False.

    Returns:
        True if TensorFlow now uses `threads` threads.
    """
    import tensorflow as tf  # noqa: PLC0415

    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"`threads` must be an int >= 0, got {threads!r}.")
    config = tf.config.threading
    if (config.get_intra_op_parallelism_threads(),
            config.get_inter_op_parallelism_threads()) == (threads, threads):
        return True
    try:
        config.set_intra_op_parallelism_threads(threads)
        config.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        if not strict:
            return False
        raise ValueError(f"Cannot switch TensorFlow to {threads} thread(s): it has started "
                         "already. Call set_threads first (in a notebook: restart the "
                         "kernel).") from None
    return True


def threads():
    import tensorflow as tf  # noqa: PLC0415

    config = tf.config.threading
    return {"intra_op": config.get_intra_op_parallelism_threads(),
            "inter_op": config.get_inter_op_parallelism_threads()}


def data_digest(task: datasets.Task) -> str:
    """sha256 of the task's arrays (dtype, shape and bytes of each)."""
    digest = hashlib.sha256()
    for name in ("x_train", "y_train", "x_test", "y_test"):
        array = np.ascontiguousarray(getattr(task, name))
        digest.update(f"{name} {array.dtype.str} {array.shape}".encode())
        digest.update(array.tobytes())
    digest.update(repr((float(task.y_shift), float(task.y_scale))).encode())
    return digest.hexdigest()


def versions():
    """The versions of everything whose arithmetic a run depends on."""
    import tensorflow as tf  # noqa: PLC0415

    return {"tfp_bnn": tfp_bnn.__version__, "keras": keras.__version__,
            "tensorflow": tf.__version__, "python": platform.python_version()}


def fingerprint(config, task):
    """What a checkpoint must match to be resumed: everything that shapes training.

    The arguments (model, split, seed, epochs, batch size, strategy,
    overrides), the data's content, the TensorFlow threads and the library
    versions; not what only scoring or output uses.
    """
    result = {k: v for k, v in config.items()
              if k not in ("num_samples", "description", "checkpoint_seconds", "verbose")}
    result.update(data=data_digest(task), threads=threads(), versions=versions())
    return result
