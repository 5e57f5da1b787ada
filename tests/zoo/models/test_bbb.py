"""Tests of zoo.models.bbb: the one `bbb_mlp`, for the registry and the main job."""

import math

import pytest

import tfp_bnn
import zoo
from tfp_bnn import posteriors
from tfp_bnn import priors
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.losses import GaussianNLL
from zoo.models.bbb import bbb_mlp


def _check_bbb_layers(layers, num_train):
    for layer in layers:
        assert type(layer) is DenseReparameterization
        assert isinstance(layer.prior, priors.ScaleMixturePrior)
        assert (layer.prior.pi, layer.prior.sigma1) == (0.5, 1.0)
        assert layer.prior.sigma2 == pytest.approx(math.exp(-6.0))
        assert layer.kl_estimator == "mc"
        assert isinstance(layer.posterior, posteriors.MeanFieldNormal)
        assert layer.posterior.rho_init == -5.0
        assert float(layer.kl_weight.numpy()) == pytest.approx(1 / num_train)
    # Seeds of different layers differ, so no two layers share a noise stream.
    assert len({layer.seed for layer in layers}) == len(layers)


@pytest.mark.parametrize("name", ["bbb_mlp", "bbb_mlp_heteroscedastic"])
def test_registry_models_use_a_scale_mixture_prior_and_the_mc_kl(name):
    model = zoo.build_model(name, (8,), num_train=16)
    layers = tfp_bnn.bayesian_layers(model)
    assert [layer.units for layer in layers] == [50, 1 if name == "bbb_mlp" else 2]
    _check_bbb_layers(layers, 16)


def test_main_job_settings_give_two_hidden_layers_and_a_heteroscedastic_output():
    # What `python -m zoo` builds (zoo.experiments.main_job), in small.
    model = bbb_mlp((8,), num_train=100, seed=3, hidden_units=(16, 8), learning_rate=3e-3,
                    heteroscedastic=True)
    layers = tfp_bnn.bayesian_layers(model)
    assert [layer.units for layer in layers] == [16, 8, 2]
    _check_bbb_layers(layers, 100)
    assert isinstance(model.loss, GaussianNLL)
    assert model.output_shape == (None, 2) and model.layers[-1] is layers[-1]
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(3e-3)
