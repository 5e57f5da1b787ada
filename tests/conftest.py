"""Test-session set-up shared by the whole suite."""

import os

# Quiet TensorFlow's C++ start-up chatter; errors still show.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

# Two logical CPU devices, so tf.distribute tests can run two replicas on
# one physical CPU. This must happen before TensorFlow initialises devices.
_cpus = tf.config.list_physical_devices("CPU")
try:
    tf.config.set_logical_device_configuration(
        _cpus[0], [tf.config.LogicalDeviceConfiguration()] * 2
    )
except RuntimeError:  # devices already initialised by an earlier import
    pass

import keras  # noqa: E402
import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _fixed_global_seeds():
    """Every test starts from the same Python, NumPy and TensorFlow seeds.

    A per-test reset keeps results independent of test order.
    """
    keras.utils.set_random_seed(20261120)


@pytest.fixture
def record_figures(monkeypatch):
    """`record_figures(module)` -> list of the Figures `module._save` draws.

    For the plot modules (`tfp_bnn.plots`, `tfp_bnn.plots_nodes`), whose
    functions draw through `_save(draw, path)`: the tests inspect the artists.
    """

    def record(module):
        figures = []
        original = module._save

        def recording_save(draw, path):
            def recording_draw(figure):
                draw(figure)
                figures.append(figure)

            return original(recording_draw, path)

        monkeypatch.setattr(module, "_save", recording_save)
        return figures

    return record


@pytest.fixture
def mixed_float16():
    """The global policy is mixed_float16 for this test, restored afterwards."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy(previous)
