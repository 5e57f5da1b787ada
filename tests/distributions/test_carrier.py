"""The tensor that carries a distribution, through what Keras does before a loss."""

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp

import tfp_bnn
from tests.layers.distribution.distribution_heads import DISTRIBUTION_LAYERS
from tests.layers.distribution.distribution_heads import distribution_model
from tfp_bnn import layers
from tfp_bnn.distributions import FORWARDED_METHODS
from tfp_bnn.distributions import carries_distribution
from tfp_bnn.distributions import distribution_of
from tfp_bnn.distributions import negative_log_likelihood

tfd = tfp.distributions


def test_forwarded_methods_shadow_nothing_of_a_tensor():
    tensor = tf.constant([1.0])
    assert not [name for name in FORWARDED_METHODS if hasattr(tensor, name)]


def test_found_through_casts_and_reshapes_in_a_graph():
    layer = layers.IndependentNormal(1, convert_to_tensor_fn="mean")

    @tf.function
    def through(params):
        value = layer(params)
        cast = tf.cast(value, tf.float64)  # a float64 loss
        squeezed = tf.squeeze(cast, -1)    # rank alignment
        found = distribution_of(squeezed)
        return found.log_prob(tf.zeros([3, 1])), carries_distribution(value * 2.0)

    log_p, after_arithmetic = through(tf.zeros([3, 2]))
    np.testing.assert_allclose(
        log_p, tfd.Normal(0.0, tf.nn.softplus(0.0)).log_prob(0.0) * np.ones(3), rtol=1e-6)
    assert not after_arithmetic


@pytest.mark.jax
def test_eager_tensor_without_distribution_is_refused():
    assert not carries_distribution(np.zeros(3))
    with pytest.raises(ValueError, match="carries no distribution.*ndarray"):
        distribution_of(np.zeros(3))


# -- TFP's lambda loss on heads whose dtype is not the loss' (floatx) ----------------------

def _negloglik(y, rv_y):  # TFP's loss, as its examples write it
    return -rv_y.log_prob(y)


@pytest.fixture
def mixed_precision():
    keras.config.set_dtype_policy("mixed_float16")
    yield
    keras.config.set_dtype_policy("float32")


def _losses_agree(name, dtype):
    """TFP's lambda loss evaluates to the mean NLL of the batch, computed eagerly.

    `evaluate` runs the loss as `fit` does (Keras' Loss.__call__ casts the
    output to floatx in the traced step); one `fit` is tested below.
    """
    targets = DISTRIBUTION_LAYERS[name][2]
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(16, 3)), targets(rng, 16)
    model = distribution_model(name, dtype=dtype, convert_to_tensor_fn="sample", seed=2)
    model.compile("adam", loss=_negloglik, jit_compile=False)  # XLA would cost time only
    loss = model.evaluate(x, y, batch_size=16, verbose=0)
    per_example = negative_log_likelihood(y, model(x))  # no cast: in the head's dtype
    expected = np.mean(np.asarray(per_example, np.float64))
    assert np.isfinite(loss)
    # Keras reports the loss in float32; a float16 head rounds each term to 2^-11.
    rtol = max(1e-5, 4 * float(np.finfo(per_example.dtype.as_numpy_dtype).eps))
    np.testing.assert_allclose(loss, expected, rtol=rtol)
    return model, x, y


def test_tfp_lambda_loss_fits_a_float64_poisson_head():
    model, x, y = _losses_agree("IndependentPoisson", "float64")
    model.compile("adam", loss=_negloglik, jit_compile=False)
    history = model.fit(x, y, batch_size=16, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


@pytest.mark.parametrize("name", sorted(DISTRIBUTION_LAYERS))
def test_tfp_lambda_loss_evaluates_a_float64_head(name):
    _losses_agree(name, "float64")


# TensorFlow has no float16 triangular solve (MatrixTriangularSolve): a float16
# MultivariateNormalTriL head has no log-density, whatever the loss.
@pytest.mark.parametrize("name", sorted(set(DISTRIBUTION_LAYERS) - {"MultivariateNormalTriL"}))
def test_tfp_lambda_loss_evaluates_a_float16_head(name, mixed_precision):
    _losses_agree(name, "mixed_float16")


def test_lookup_through_a_cast_finds_only_the_forwarded_methods():
    layer = layers.IndependentNormal(1, convert_to_tensor_fn="mean")

    @tf.function
    def through(params):
        cast = tf.cast(layer(params), tf.float64)
        with pytest.raises(AttributeError):
            cast.not_a_method  # noqa: B018 - the attribute access is the test
        assert not hasattr(tf.cast(params, tf.float64), "log_prob")  # carries nothing
        return cast.log_prob(tf.zeros([3, 1], tf.float32))  # a float32 target, cast

    np.testing.assert_allclose(through(tf.zeros([3, 2])),
                               tfd.Normal(0.0, tf.nn.softplus(0.0)).log_prob(0.0) * np.ones(3),
                               rtol=1e-6)


def test_run_eagerly_with_a_head_in_another_dtype_says_why_and_what_to_do():
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 3)), rng.integers(0, 3, (8, 2)).astype("float64")
    model = distribution_model("IndependentPoisson", dtype="float64")
    model.compile("adam", loss=_negloglik, run_eagerly=True)
    with pytest.raises(AttributeError, match=r"no attribute 'log_prob'\. If it is a tfp_bnn "
                       r"distribution layer's output .*run_eagerly=True"):
        model.evaluate(x, y, verbose=0)
    model.compile("adam", loss=tfp_bnn.losses.NegativeLogLikelihood(), run_eagerly=True)
    with pytest.raises(ValueError, match=r"carries no distribution.*run_eagerly=True"):
        model.evaluate(x, y, verbose=0)
