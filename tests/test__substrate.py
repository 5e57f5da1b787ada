"""TFP's substrate follows the Keras backend: its arrays are the backend's."""

import keras
import pytest

from tfp_bnn._substrate import tfb
from tfp_bnn._substrate import tfd
from tfp_bnn._substrate import tfp

pytestmark = pytest.mark.jax


def _seed():
    if keras.backend.backend() == "jax":
        import jax

        return jax.random.PRNGKey(0)
    return 0


def test_samples_and_densities_are_arrays_of_the_active_backend():
    normal = tfd.Normal(keras.ops.zeros(3), 1.0)
    sample = normal.sample(seed=_seed())
    assert keras.ops.is_tensor(sample) and keras.ops.is_tensor(normal.log_prob(sample))
    expected = {"jax": "tensorflow_probability.substrates.jax.",
                "tensorflow": "tensorflow_probability.python."}[keras.backend.backend()]
    assert type(normal).__module__.startswith(expected), type(normal).__module__
    assert type(sample).__module__.split(".")[0] == {"jax": "jaxlib", "tensorflow":
                                                     "tensorflow"}[keras.backend.backend()] \
        or type(sample).__module__.startswith("jax")


def test_bijectors_and_kl_come_from_the_same_substrate():
    assert tfd is tfp.distributions and tfb is tfp.bijectors
    kl = tfd.kl_divergence(tfd.Normal(0.0, 1.0), tfd.Normal(1.0, 2.0))
    # KL(N(0,1) || N(1,4)) = log 2 + (1 + 1) / 8 - 1/2
    assert abs(float(kl) - (0.6931471805599453 + 0.25 - 0.5)) < 1e-6
    assert abs(float(tfb.Exp().forward(0.0)) - 1.0) < 1e-7
