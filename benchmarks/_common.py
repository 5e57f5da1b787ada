"""Start-up shared by the benchmark scripts, and the MNIST-sized MLP two of them time.

Every script imports this module before TensorFlow:

    import _common  # TensorFlow's C++ start-up notices off; the repository on sys.path

so that `tfp_bnn` and `zoo` come from this checkout whether or not the
package is installed, and the only output is the benchmark's own.
"""

import os
import pathlib
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

ROOT = pathlib.Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# The 784-400-400-10 MLP of train_step.py and predict.py (MNIST-shaped inputs).
INPUT_DIM = 784
HIDDEN = (400, 400)
CLASSES = 10


def mlp(layer_fn):
    """A Keras 3 784-400-400-10 MLP: `layer_fn(units, activation)` makes each layer.

    relu hidden layers, logits out (activation None).
    """
    import keras

    return keras.Sequential(
        [keras.Input((INPUT_DIM,))]
        + [layer_fn(units, "relu") for units in HIDDEN]
        + [layer_fn(CLASSES, None)]
    )


def require_positive(parser, args, names):
    """Ends the command line with one line naming the first of `names` below 1.

    `names` are attribute names of the parsed `args` (`warmup_steps` is the
    flag `--warmup-steps`).
    """
    for name in names:
        value = getattr(args, name)
        if value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {value}")


BACKENDS = ("tensorflow", "jax")


def add_backend_flag(parser):
    """`--backend {tensorflow,jax}`: the Keras backend to time (default: the active one)."""
    parser.add_argument(
        "--backend", choices=BACKENDS, default=None,
        help="Keras backend to time (default: the active one, TensorFlow unless "
             "KERAS_BACKEND says otherwise). Keras picks its backend at import, so "
             "another one re-runs this script in a subprocess with KERAS_BACKEND set")


def rerun_with_backend(script, argv, backend) -> int:
    """Runs `script` with `argv` in a subprocess with KERAS_BACKEND=`backend`; its exit code.

    The subprocess's output is relayed line by line to this process's
    stdout (so a caller capturing `sys.stdout` sees it too).
    """
    if os.environ.get("KERAS_BACKEND") == backend:
        # Keras was started with this backend requested and runs on another: do not loop.
        raise RuntimeError(f"KERAS_BACKEND={backend} is set but Keras did not pick it")
    return run_with_backend(script, argv, backend)[0]


def run_with_backend(script, argv, backend):
    """(exit code, output) of `script` run with `argv` under KERAS_BACKEND=`backend`.

    The output (stdout and stderr) is relayed line by line as it comes.
    """
    import subprocess  # noqa: PLC0415

    argv = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ, KERAS_BACKEND=backend)
    print(f"(re-running {pathlib.Path(script).name} with KERAS_BACKEND={backend})", flush=True)
    lines = []
    with subprocess.Popen([sys.executable, str(script), *argv], env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT) as child:
        for line in child.stdout:
            lines.append(line)
            print(line, end="", flush=True)
    return child.returncode, "".join(lines)


def is_jax() -> bool:
    """True when Keras runs on JAX in this process."""
    import keras  # noqa: PLC0415

    return keras.backend.backend() == "jax"
