"""tfp.layers argument names get a ValueError that names the tfp_bnn equivalent."""

import pytest
import tensorflow_probability as tfp

from tfp_bnn._tfp_names import BUILDER_ADVICE
from tfp_bnn._tfp_names import builder_advice
from tfp_bnn._tfp_names import kl_estimator_with_tfp_alias
from tfp_bnn.layers import Conv2DFlipout
from tfp_bnn.layers import DenseFlipout
from tfp_bnn.layers import DenseLocalReparameterization
from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.layers import NodeDense

tfd = tfp.distributions

LAYERS = {
    "DenseFlipout": lambda **kw: DenseFlipout(3, **kw),
    "DenseReparameterization": lambda **kw: DenseReparameterization(3, **kw),
    "DenseLocalReparameterization": lambda **kw: DenseLocalReparameterization(3, **kw),
    "Conv2DFlipout": lambda **kw: Conv2DFlipout(2, 3, **kw),
    "NodeDense": lambda **kw: NodeDense(3, **kw),
}


def _tfp_fn(*args):
    return None


# (argument, value, what the message must name)
CASES = [
    ("kernel_posterior_fn", _tfp_fn, "posterior=tfp_bnn.posteriors.MeanFieldNormal"),
    ("kernel_prior_fn", _tfp_fn, "prior=tfp_bnn.priors.NormalPrior"),
    ("kernel_divergence_fn", _tfp_fn, "kl_weight=1/N"),
    ("bias_divergence_fn", _tfp_fn, "KLScheduler(num_examples=N)"),
    ("bias_posterior_fn", _tfp_fn, "bayesian_bias=True"),
    ("bias_prior_fn", None, "bayesian_bias=True"),
    ("kernel_posterior_tensor_fn", _tfp_fn, "tfp_bnn.set_mean_mode"),
    ("bias_posterior_tensor_fn", _tfp_fn, "tfp_bnn.set_mean_mode"),
]


@pytest.mark.parametrize("layer", sorted(LAYERS))
@pytest.mark.parametrize("argument, value, advice", CASES, ids=[c[0] for c in CASES])
def test_tfp_argument_is_explained(layer, argument, value, advice):
    with pytest.raises(ValueError) as info:
        LAYERS[layer](**{argument: value})
    message = str(info.value)
    assert message.startswith(f"`{argument}` is a tfp.layers argument that {layer}")
    assert advice in message
    assert "\n" not in message


def test_a_scaled_kl_divergence_fn_gets_its_weight_back():
    def divergence(q, p, _):
        return tfd.kl_divergence(q, p) / 60000.0

    with pytest.raises(ValueError, match=r"kl_weight=1\.66667e-05.*num_examples=60000"):
        DenseFlipout(3, kernel_divergence_fn=divergence)
    with pytest.raises(ValueError, match="kl_weight=0"):
        DenseFlipout(3, kernel_divergence_fn=None)
    with pytest.raises(ValueError, match="kl_weight=1/N"):  # not callable on Normals
        DenseFlipout(3, kernel_divergence_fn=lambda q, p, _: q.no_such_method())


def test_bias_posterior_fn_values_map_to_bias_arguments():
    with pytest.raises(ValueError, match="use_bias=False"):
        DenseReparameterization(3, bias_posterior_fn=None)


def test_tfp_default_posterior_functions_are_recognized():
    pytest.importorskip("tf_keras")
    from tensorflow_probability.python.layers import util as tfp_util  # noqa: PLC0415

    point_mass = tfp_util.default_mean_field_normal_fn(is_singular=True)
    with pytest.raises(ValueError, match=r"point-mass bias is tfp_bnn's default"):
        DenseFlipout(3, bias_posterior_fn=point_mass)
    with pytest.raises(ValueError, match=r"is `bayesian_bias=True`"):
        DenseFlipout(3, bias_posterior_fn=tfp_util.default_mean_field_normal_fn())


def test_other_unknown_arguments_still_reach_keras():
    with pytest.raises((TypeError, ValueError), match="kernel_posterior_fnn"):
        DenseFlipout(3, kernel_posterior_fnn=None)


# -- DenseVariational's builder functions --------------------------------------------------

@pytest.fixture(scope="module")
def tfp_builders():
    pytest.importorskip("tf_keras")  # TFP's builders are tf_keras models
    from tests.integration import tfp_builders  # noqa: PLC0415 - after the skip

    return tfp_builders


@pytest.mark.parametrize("builder, expected, absent", [
    ("keras_io_posterior", "posterior=tfp_bnn.posteriors.FullCovarianceNormal(rho_init=0.0, "
     "rho_init_stddev=0.0, scale_offset=1e-5)` with `kernel_initializer='zeros'`",
     "MeanFieldNormal"),
    ("posterior_mean_field", "posterior=tfp_bnn.posteriors.MeanFieldNormal(rho_init=math.log("
     "math.e - 1), rho_init_stddev=0.0, scale_offset=1e-5)` with `kernel_initializer='zeros'`",
     "FullCovarianceNormal"),
])
def test_posterior_builder_advice_names_its_family_and_start(tfp_builders, builder, expected,
                                                             absent):
    advice = builder_advice("posterior", getattr(tfp_builders, builder))
    assert expected in advice
    assert absent not in advice


@pytest.mark.parametrize("builder, expected, absent", [
    ("prior_trainable", "prior=tfp_bnn.priors.TrainableNormalPrior()`", "NormalPrior()"),
    ("keras_io_prior", "prior=tfp_bnn.priors.NormalPrior()`", "Trainable"),
])
def test_prior_builder_advice_names_a_trainable_or_fixed_prior(tfp_builders, builder, expected,
                                                               absent):
    advice = builder_advice("prior", getattr(tfp_builders, builder))
    assert expected in advice
    assert absent not in advice.replace(expected, "")


def test_an_unreadable_builder_gets_both_posterior_families():
    advice = builder_advice("posterior", lambda *args: None)
    assert advice == BUILDER_ADVICE["posterior"]
    assert "MeanFieldNormal" in advice and "FullCovarianceNormal" in advice


@pytest.mark.parametrize("kl_estimator, tfp_value, expected", [
    (None, None, "mc"),  # TFP's default: kl_use_exact=False, use_exact_kl=False
    (None, True, "analytic"),
    (None, False, "mc"),
    ("auto", None, "auto"),
    ("analytic", True, "analytic"),
    ("mc", False, "mc"),
])
def test_kl_estimator_and_tfps_boolean_say_one_estimator(kl_estimator, tfp_value, expected):
    assert kl_estimator_with_tfp_alias(kl_estimator, "use_exact_kl", tfp_value) == expected


@pytest.mark.parametrize("kl_estimator, tfp_value, message", [
    ("mc", True, r"`kl_use_exact`=True and `kl_estimator`='mc' disagree"),
    ("auto", False, r"`kl_use_exact`=False and `kl_estimator`='auto' disagree"),
    (None, 1, r"`kl_use_exact` must be True or False, got 1"),
])
def test_a_disagreement_or_a_non_bool_is_refused(kl_estimator, tfp_value, message):
    with pytest.raises(ValueError, match=message):
        kl_estimator_with_tfp_alias(kl_estimator, "kl_use_exact", tfp_value)
