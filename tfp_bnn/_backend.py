"""The import-time check that Keras 3 runs on its TensorFlow backend.

tfp_bnn builds on TensorFlow Probability and TensorFlow ops inside Keras
layers, so it works only with `KERAS_BACKEND=tensorflow`. Without this check
another backend fails later, deep inside Keras or TensorFlow.
"""

import json
import os

SUPPORTED = "tensorflow"


def backend_error(name: str) -> ImportError:
    """The one error for every other backend: which is active, how to switch."""
    return ImportError(
        f"tfp_bnn needs the TensorFlow backend of Keras 3, but the active Keras backend "
        f"is {name!r}. Set the environment variable KERAS_BACKEND=tensorflow before "
        "keras is first imported (`export KERAS_BACKEND=tensorflow` in the shell, or "
        "`os.environ['KERAS_BACKEND'] = 'tensorflow'` at the top of the script)."
    )


def check_backend(name: str) -> None:
    """Raises `backend_error(name)` unless `name` is the TensorFlow backend."""
    if name != SUPPORTED:
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
        return SUPPORTED
    backend = config.get("backend") if isinstance(config, dict) else None
    return backend if isinstance(backend, str) and backend else SUPPORTED


def require_tensorflow() -> None:
    """Raises ImportError unless Keras runs (or would run) on TensorFlow.

    Keras itself may fail to import under another backend (its numpy backend
    needs jax), so that failure is reported as the backend problem it is.
    """
    try:
        import keras
    except ImportError as err:
        name = configured_backend()
        if name != SUPPORTED:
            raise backend_error(name) from err
        raise
    check_backend(keras.backend.backend())
