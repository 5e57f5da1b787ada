"""Priors: densities, serialization and argument validation."""

import keras
import numpy as np
import pytest
import tensorflow_probability as tfp

from tfp_bnn import priors

tfd = tfp.distributions


@pytest.mark.jax
def test_normal_prior_log_prob_matches_closed_form():
    prior = priors.NormalPrior(loc=0.5, scale=2.0)
    w = np.linspace(-3, 3, 7).astype("float32")
    expected = -0.5 * np.log(2 * np.pi) - np.log(2.0) - (w - 0.5) ** 2 / 8.0
    np.testing.assert_allclose(prior.element_distribution().log_prob(w), expected, rtol=1e-6)


def test_scale_mixture_log_prob_matches_closed_form():
    prior = priors.ScaleMixturePrior(pi=0.25, sigma1=1.5, sigma2=0.1)
    w = np.linspace(-2, 2, 9)

    def normal_pdf(x, s):
        return np.exp(-0.5 * (x / s) ** 2) / (s * np.sqrt(2 * np.pi))

    expected = np.log(0.25 * normal_pdf(w, 1.5) + 0.75 * normal_pdf(w, 0.1))
    got = prior.element_distribution("float64").log_prob(w)
    np.testing.assert_allclose(got, expected, rtol=1e-10)


@pytest.mark.jax
def test_whole_tensor_distribution_has_the_weight_shape_as_event():
    dist = priors.NormalPrior().distribution((3, 4))
    assert tuple(dist.event_shape) == (3, 4)
    assert float(dist.log_prob(np.zeros((3, 4), "float32"))) == pytest.approx(
        12 * -0.5 * np.log(2 * np.pi), rel=1e-6
    )


@pytest.mark.parametrize(
    "prior", [priors.NormalPrior(0.1, 0.3), priors.ScaleMixturePrior(0.3, 2.0, 0.05)]
)
@pytest.mark.jax
def test_serialization_round_trip(prior):
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(prior))
    assert restored == prior and restored is not prior


@pytest.mark.parametrize(
    "make, argument",
    [
        (lambda: priors.NormalPrior(scale=0.0), "scale"),
        (lambda: priors.NormalPrior(scale=-1.0), "scale"),
        (lambda: priors.NormalPrior(loc=float("nan")), "loc"),
        (lambda: priors.ScaleMixturePrior(pi=0.0), "pi"),
        (lambda: priors.ScaleMixturePrior(pi=1.0), "pi"),
        (lambda: priors.ScaleMixturePrior(pi=1.5), "pi"),
        (lambda: priors.ScaleMixturePrior(sigma1=0.1, sigma2=0.5), "sigma1"),
        (lambda: priors.ScaleMixturePrior(sigma1=0.5, sigma2=0.5), "sigma1"),
        (lambda: priors.ScaleMixturePrior(sigma2=-0.1), "sigma2"),
        (lambda: priors.get("laplace"), "prior"),
        (lambda: priors.get(3), "prior"),
    ],
)
@pytest.mark.jax
def test_invalid_arguments_name_the_argument(make, argument):
    with pytest.raises(ValueError, match=f"`{argument}`"):
        make()


@pytest.mark.jax
def test_get_resolves_names_and_default():
    assert priors.get(None) == priors.NormalPrior(0.0, 1.0)
    assert isinstance(priors.get("scale_mixture"), priors.ScaleMixturePrior)
