"""The import-time check of the Keras backend, and which one is active.

tfp_bnn runs on Keras 3's TensorFlow and JAX backends: its layers are written
in `keras.ops` and `keras.random`, and what needs TensorFlow Probability
(distributions, bijectors, KL divergences) takes TFP's substrate for the
active backend (`tfp_bnn._substrate`). TFP has no PyTorch substrate, so the
PyTorch (and NumPy, OpenVINO) backends get one clear ImportError at
`import tfp_bnn` instead of a failure deep inside a layer.
"""

import json
import os

SUPPORTED = ("tensorflow", "jax")

# The JAX versions TFP's JAX substrate runs with, as the `jax` extra pins them.
JAX_EXTRA = 'pip install "tfp-bnn[jax]"'


def backend_error(name: str) -> ImportError:
    """The one error for every unsupported backend: which is active, how to switch."""
    return ImportError(
        f"tfp_bnn runs on the TensorFlow and JAX backends of Keras 3, but the active Keras "
        f"backend is {name!r} (TensorFlow Probability has no substrate for it). Set the "
        "environment variable KERAS_BACKEND=tensorflow or KERAS_BACKEND=jax before keras is "
        "first imported (`export KERAS_BACKEND=jax` in the shell, or "
        "`os.environ['KERAS_BACKEND'] = 'jax'` at the top of the script)."
    )


def check_backend(name: str) -> None:
    """Raises `backend_error(name)` unless `name` is a supported backend."""
    if name not in SUPPORTED:
        raise backend_error(name)


def configured_backend() -> str:
    """The backend Keras would select, read without importing Keras.

    As `keras/src/backend/config.py` decides: a non-empty `KERAS_BACKEND`,
    else the "backend" of `keras.json` in `KERAS_HOME` (default `~/.keras`, or
    `/tmp/.keras` when the home directory is not writable), else TensorFlow.
    """
    name = os.environ.get("KERAS_BACKEND")
    if name:
        return name
    home = os.environ.get("KERAS_HOME")
    if home is None:
        base = os.path.expanduser("~")
        home = os.path.join(base if os.access(base, os.W_OK) else "/tmp", ".keras")
    try:
        with open(os.path.expanduser(os.path.join(home, "keras.json"))) as f:
            config = json.load(f)
    except (OSError, ValueError):
        return "tensorflow"
    backend = config.get("backend") if isinstance(config, dict) else None
    return backend if isinstance(backend, str) and backend else "tensorflow"


def require_supported() -> None:
    """Raises ImportError unless Keras runs (or would run) on a supported backend.

    Keras itself may fail to import under another backend (its NumPy backend
    needs jax), so that failure is reported as the backend problem it is. On
    JAX, TFP's JAX substrate must import with the installed jax: a jax newer
    than TFP knows fails there, and the error names the versions and the extra
    that pins working ones.
    """
    try:
        import keras
    except ImportError as err:
        name = configured_backend()
        if name not in SUPPORTED:
            raise backend_error(name) from err
        raise
    name = keras.backend.backend()
    check_backend(name)
    if name == "jax":
        _check_jax_substrate()


def _check_jax_substrate() -> None:
    import jax  # noqa: PLC0415 - Keras' JAX backend imported it already

    try:
        from tensorflow_probability.substrates import jax as tfp_jax  # noqa: PLC0415

        tfp_jax.distributions.Normal(0.0, 1.0)
    except Exception as err:  # noqa: BLE001 - any failure here is a version mismatch
        import tensorflow_probability as tfp  # noqa: PLC0415

        raise ImportError(
            f"tfp_bnn on the JAX backend needs TensorFlow Probability's JAX substrate, which "
            f"fails with jax {jax.__version__} and TFP {tfp.__version__} "
            f"({type(err).__name__}: {err}). {JAX_EXTRA} installs versions that work together."
        ) from err


def active() -> str:
    """The name of the active Keras backend ("tensorflow" or "jax")."""
    import keras  # noqa: PLC0415

    return keras.backend.backend()


def is_jax() -> bool:
    """True when Keras runs on JAX."""
    return active() == "jax"
