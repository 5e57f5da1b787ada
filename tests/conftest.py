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
