"""IndependentNormal: the Gaussian output layer, trained and inspected as in TFP."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tests.layers.distribution.distribution_heads import check_same_distribution_as_tfp
from tests.layers.distribution.distribution_heads import fit_eagerly_and_reload
from tests.layers.distribution.distribution_heads import normal_model
from tests.layers.distribution.distribution_heads import regression_data
from tfp_bnn import layers
from tfp_bnn._substrate import tfd
from tfp_bnn.distributions import distribution_of


def test_same_distribution_as_tfp():
    check_same_distribution_as_tfp("IndependentNormal", ((2, 3),))


@pytest.mark.jax
def test_the_tfp_idiom_fits_returns_the_distribution_and_reloads(tmp_path):
    """Dense(params_size) -> IndependentNormal, the NLL, fit; model(x) is the Normal."""
    x, y = regression_data(64)
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((2,)),
                              keras.layers.Dense(layers.IndependentNormal.params_size(1)),
                              layers.IndependentNormal(1, seed=3)])
    model.compile(keras.optimizers.Adam(0.05), loss=tfp_bnn.losses.negative_log_likelihood)
    losses, yhat, reloaded = fit_eagerly_and_reload(model, x, y, tmp_path)
    assert losses[-1] < losses[0]
    params = keras.ops.convert_to_numpy(model.layers[0](x))
    expected = tfd.Independent(tfd.Normal(params[:, :1], keras.ops.softplus(params[:, 1:])), 1)
    targets = y[:, None]
    for output in (yhat, reloaded):   # the output carries (on JAX: is) the distribution
        np.testing.assert_allclose(output.mean(), expected.mean(), rtol=1e-5)
        np.testing.assert_allclose(output.stddev(), expected.stddev(), rtol=1e-5)
        np.testing.assert_allclose(output.log_prob(targets), expected.log_prob(targets),
                                   rtol=1e-5, atol=1e-5)
    nll = model.evaluate(x, y, verbose=0)
    model.compile(loss=negloglik)   # TFP's own loss, on the output of a compiled step
    assert model.evaluate(x, y, verbose=0) == pytest.approx(nll, rel=1e-6)


def test_wrong_params_size_is_named():
    with pytest.raises(ValueError, match=r"params_size = 4 values.*Dense\(IndependentNormal"):
        layers.IndependentNormal(2)(np.zeros((3, 5), "float32"))


@pytest.mark.parametrize("bad", [0, -1, (2, 0), "a", 1.5])
def test_bad_event_shape(bad):
    with pytest.raises(ValueError, match="event_shape"):
        layers.IndependentNormal(bad)


def negloglik(y, rv_y):
    return -rv_y.log_prob(y)


def test_tfp_lambda_loss_and_our_loss_train_identically():
    """TFP's `lambda y, rv_y: -rv_y.log_prob(y)` works in compile and equals ours."""
    x, y = regression_data()
    histories = []
    for loss in (negloglik, tfp_bnn.losses.NegativeLogLikelihood()):
        model = normal_model()
        model.compile(keras.optimizers.Adam(0.05), loss=loss)
        histories.append(model.fit(x, y, epochs=3, batch_size=64, shuffle=False,
                                   verbose=0).history["loss"])
    assert histories[0] == histories[1]
    assert histories[0][-1] < histories[0][0]


def test_fit_evaluate_and_inspect_like_tfp():
    x, y = regression_data()
    model = normal_model()
    model.compile(keras.optimizers.Adam(0.05), loss=tfp_bnn.losses.NegativeLogLikelihood(),
                  metrics=["mae"])
    model.fit(x, y, epochs=150, batch_size=64, verbose=0)
    loss, mae = model.evaluate(x, y, verbose=0)
    yhat = model(x)
    # The noise is 0.2: the NLL of N(0, 0.2^2) is log(0.2 sqrt(2 pi e)) = -0.19.
    assert loss < 0.0
    np.testing.assert_allclose(yhat.mean()[:, 0], x @ np.array([2.0, -1.0]) + 0.5, atol=0.15)
    assert 0.1 < float(np.mean(yhat.stddev())) < 0.3
    # The value is a sample, so its error is about the noise; the mean's is smaller.
    assert mae > float(np.mean(np.abs(yhat.mean()[:, 0] - y)))


def test_seeded_samples_are_reproducible():
    params = np.zeros((4, 2), "float32")
    a = layers.IndependentNormal(1, seed=11)
    b = layers.IndependentNormal(1, seed=11)
    np.testing.assert_array_equal(a(params), b(params))
    assert not np.array_equal(a(params), a(params))


def test_mixed_precision_head_computes_in_float32(mixed_float16):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2),
                              layers.IndependentNormal(1)])
    x, y = regression_data(64)
    model.compile("adam", loss=tfp_bnn.losses.NegativeLogLikelihood())
    history = model.fit(x, y, epochs=2, verbose=0).history["loss"]
    assert np.all(np.isfinite(history))
    assert model.layers[-1].compute_dtype == "float32"
    assert distribution_of(model(x[:2])).dtype == tf.float32
