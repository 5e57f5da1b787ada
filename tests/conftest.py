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
    """`record_figures(module)` -> list of the Figures `module.save_figure` draws.

    For the plot modules (`tfp_bnn.plots`, `tfp_bnn.plots_nodes`), whose
    functions draw through `save_figure(draw, path)`: the tests inspect the artists.
    """

    def record(module):
        figures = []
        original = module.save_figure

        def recording_save(draw, path):
            def recording_draw(figure):
                draw(figure)
                figures.append(figure)

            return original(recording_draw, path)

        monkeypatch.setattr(module, "save_figure", recording_save)
        return figures

    return record


@pytest.fixture
def mixed_float16():
    """The global policy is mixed_float16 for this test, restored afterwards."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy(previous)


def pytest_collection_modifyitems(config, items):
    """Files with slow tests run first, the rest keep their order.

    With `--dist loadfile` each file goes whole to the next free worker in
    collection order; a slow file collected last (tests/zoo/... sorts late)
    would run alone at the end while the other worker idles. Longest jobs
    first keeps both workers busy to the end.
    """
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: order kept otherwise
