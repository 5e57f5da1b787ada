"""Parity of KLDivergenceRegularizer and KLDivergenceAddLoss with `tfp.layers` (tf_keras).

Both put a MultivariateNormalTriL head on the same parameters and add the KL
to the same prior:

- exact (`use_exact_kl=True`, an MVN prior) and Monte Carlo at the mean
  (convert_to_tensor_fn = mean: deterministic test points) agree to float
  tolerance, for both forms and TFP's reduce axes and weights;
- Monte Carlo at the head's own samples (TFP's default test points) against
  an independent Normal prior, for which TFP has no closed form: each
  implementation's batch-averaged estimate is within K = 4.5 standard
  errors (the spread of log a(z) - log b(z) over the N rows, / sqrt(N)) of
  the exact KL, computed as a sum of closed forms: KL(MVN || N(0, I)) is the
  KL to the MVN with identity covariance.

TFP 0.25 on tf_keras adds the regularizer's term twice per call (tf_keras
applies an activity regularizer to each of the layer's two outputs, the
distribution and its value); ours adds it once. The checks compare one term.
"""

import pytest

# First: `tfp.layers` is built on tf_keras (see tests/integration/test_tfp_parity_dense.py).
tf_keras = pytest.importorskip("tf_keras")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tensorflow_probability as tfp  # noqa: E402

from tfp_bnn import layers  # noqa: E402
from tfp_bnn.distributions import distribution_of  # noqa: E402

tfd = tfp.distributions
tfpl = tfp.layers

SIZE = 2
PARAMS = layers.MultivariateNormalTriL.params_size(SIZE)
K = 4.5


def _params(rows, seed=0, same=False):
    rng = np.random.default_rng(seed)
    params = rng.normal(scale=0.7, size=(1 if same else rows, PARAMS)).astype("float32")
    return np.repeat(params, rows, axis=0) if same else params


def _mvn_prior():
    return tfd.MultivariateNormalDiag(loc=tf.zeros(SIZE))


def _normal_prior():
    return tfd.Independent(tfd.Normal(tf.zeros(SIZE), 1.0), reinterpreted_batch_ndims=1)


def _tfp_regularizer_term(params, convert, **kl):
    head = tfpl.MultivariateNormalTriL(
        SIZE, convert_to_tensor_fn=convert,
        activity_regularizer=tfpl.KLDivergenceRegularizer(kl.pop("prior"), **kl))
    head(tf.constant(params))
    return float(head.losses[0])


def _tfp_add_loss_term(params, convert, **kl):
    inputs = tf_keras.Input((PARAMS,))
    outputs = tfpl.KLDivergenceAddLoss(kl.pop("prior"), **kl)(
        tfpl.MultivariateNormalTriL(SIZE, convert_to_tensor_fn=convert)(inputs))
    model = tf_keras.Model(inputs, outputs)
    model(tf.constant(params))
    (term,) = model.losses
    return float(term)


def _our_term(form, params, convert, **kl):
    prior = kl.pop("prior")
    if form == "regularizer":
        head = layers.MultivariateNormalTriL(
            SIZE, convert_to_tensor_fn=convert, seed=0,
            activity_regularizer=layers.KLDivergenceRegularizer(prior, **kl))
        head(params)
        (term,) = head.losses
    else:
        kl_layer = layers.KLDivergenceAddLoss(prior, **kl)
        head = layers.MultivariateNormalTriL(SIZE, convert_to_tensor_fn=convert, seed=0)
        kl_layer(head(params))
        (term,) = kl_layer.losses
    return float(term)


DETERMINISTIC = [
    {"prior": "mvn", "use_exact_kl": True},
    {"prior": "mvn", "use_exact_kl": True, "weight": 3.0},
    {"prior": "normal"},
    {"prior": "normal", "test_points_reduce_axis": None, "weight": 0.5},
    {"prior": "normal", "test_points_reduce_axis": 0},
]


@pytest.mark.parametrize("form", ["regularizer", "add_loss"])
@pytest.mark.parametrize("kl", DETERMINISTIC,
                         ids=lambda kl: "-".join(f"{k}={v}" for k, v in kl.items()))
def test_same_term_as_tfp_for_the_same_parameters(form, kl):
    params = _params(6)
    prior = {"mvn": _mvn_prior, "normal": _normal_prior}[kl["prior"]]
    theirs = _tfp_regularizer_term if form == "regularizer" else _tfp_add_loss_term
    expected = theirs(params, tfd.Distribution.mean, **{**kl, "prior": prior()})
    ours = _our_term(form, params, "mean", **{**kl, "prior": prior()})
    np.testing.assert_allclose(ours, expected, rtol=1e-5)


def _exact_kl_to_standard_normal(params):
    head = layers.MultivariateNormalTriL(SIZE, convert_to_tensor_fn="mean")
    distribution = distribution_of(head(params[:1]))
    return float(tfd.kl_divergence(distribution, _mvn_prior())[0])


@pytest.mark.parametrize("implementation", ["tfp", "tfp_bnn"])
def test_default_monte_carlo_term_is_within_k_standard_errors_of_the_exact_kl(implementation):
    # N rows with one parameter vector: N single-sample estimates of one KL,
    # averaged by KLDivergenceAddLoss's default reduce axis (None, all).
    rows = 4000
    params = _params(rows, seed=1, same=True)
    exact = _exact_kl_to_standard_normal(params)
    if implementation == "tfp":
        distribution = tfpl.MultivariateNormalTriL(SIZE)(tf.constant(params))
        z = tf.convert_to_tensor(distribution)   # the head's sample, TFP's test points
        layer = tfpl.KLDivergenceAddLoss(_normal_prior())
        layer(distribution)
        term = float(layer.losses[0])
    else:
        output = layers.MultivariateNormalTriL(SIZE, seed=3)(params)
        distribution, z = distribution_of(output), output
        layer = layers.KLDivergenceAddLoss(_normal_prior())
        layer(output)
        term = float(layer.losses[0])
    gaps = distribution.log_prob(z) - _normal_prior().log_prob(z)
    np.testing.assert_allclose(term, float(tf.reduce_mean(gaps)), rtol=1e-5)
    standard_error = float(tf.math.reduce_std(gaps)) / np.sqrt(rows)
    assert abs(term - exact) <= K * standard_error, (term, exact, standard_error)


def test_no_closed_form_for_the_vae_prior_in_either():
    params = _params(3)
    for form in ("regularizer", "add_loss"):
        with pytest.raises(NotImplementedError):
            _our_term(form, params, "mean", prior=_normal_prior(), use_exact_kl=True)
    with pytest.raises(NotImplementedError):
        _tfp_add_loss_term(params, tfd.Distribution.mean, prior=_normal_prior(),
                           use_exact_kl=True)
