"""Keras 3's own `run_layer_test` on every public layer of `tfp_bnn.layers`.

The harness checks config round trip, build, symbolic and eager calls, the
numbers of weights, variables, seed generators and losses, `supports_masking`,
one compiled training step and the mixed_float16 policy. The layers are
stochastic, so no expected output: seeded reproducibility has its own test
below, and a float64 pass checks dtypes under a non-default policy. Checks
skipped for a layer are named, with the reason, at `SHARED`.
"""

import dataclasses

import keras
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from keras.src import testing

from tfp_bnn import layers

KL = {"kl_weight": 0.1, "seed": 0}
# Abstract bases exported for subclassing (custom estimators); no layer on their own.
BASES = {layers.BayesianLayer, layers.NodeLayer}
# Layers tested with this harness in their own test files, with what it cannot
# give them here: integer inputs (the embedding) and a `keras.layers.RNN`
# around the cell, as Keras tests its own cells (the LSTM cells; the GRU cells
# share their whole code path but the gates, which their Keras parity tests cover),
# and an input that carries a distribution (KLDivergenceAddLoss: its symbolic call,
# fit, config and saving are tests/layers/distribution/test_kl_divergence.py's).
OWN_HARNESS = {layers.EmbeddingReparameterization, layers.GRUCellReparameterization,
               layers.LSTMCellReparameterization, layers.GRUCellFlipout, layers.LSTMCellFlipout,
               layers.KLDivergenceAddLoss}
# Layers whose expensive checks (training step, mixed precision, float64, seeding)
# are shared with a sibling: the 1D/3D convolutions run BayesianConvBase's
# code as Conv2D does, only shapes differ, and their own test files run the
# full harness (tests/layers/variational/conv_nd_checks.py::check_keras_harness);
# DenseVariational's training and mixed-precision pass is
# tests/layers/variational/test_dense_variational.py::test_keras_run_layer_test.
SHARED = {layers.Conv1DFlipout, layers.Conv1DReparameterization, layers.Conv3DFlipout,
          layers.Conv3DReparameterization, layers.DenseVariational}
SHARED_DTYPE_AND_SEED = SHARED - {layers.DenseVariational}  # its float64 is its own code


@keras.saving.register_keras_serializable(package="tfp_bnn_conformance")
def laplace_head(t):
    return tfp.distributions.Laplace(t[..., :1], 1e-3 + tf.nn.softplus(t[..., 1:]))


@dataclasses.dataclass
class Case:
    cls: type
    init: dict
    input_shape: object
    output_shape: tuple
    trainable: int
    non_trainable: int  # weights; the seed generators' states come on top as variables
    seeds: int
    losses: int
    masking: bool
    training_check: bool = True

    @property
    def shared(self):
        return self.cls in SHARED

    @property
    def id(self):
        return self.cls.__name__


def _bayesian(cls, init, input_shape, output_shape, trainable=3, masking=False, **kw):
    # Kernel loc and rho plus a point bias; non-trainable: kl_weight and the
    # sampling switch; one seed generator; one KL loss.
    return Case(cls, {**init, **KL}, input_shape, output_shape, trainable, 2, 1, 1, masking,
                **kw)


def _head(cls, init, params, output_shape, seeds=1, **kw):
    # Distribution heads: no weights, a seed generator per sampled distribution.
    return Case(cls, {**init, "seed": 0}, (2, params), output_shape, 0, 0, seeds, 0, False, **kw)


CONV = {1: ((2, 5, 2), (2, 3, 3)), 2: ((2, 5, 5, 2), (2, 3, 3, 3)),
        3: ((2, 4, 4, 4, 2), (2, 2, 2, 2, 3))}
CASES = [
    *[_bayesian(cls, {"units": 3}, (2, 4), (2, 3), masking=True)
      for cls in (layers.DenseFlipout, layers.DenseReparameterization,
                  layers.DenseLocalReparameterization)],
    # Posterior over kernel and bias jointly: one loc, one rho.
    _bayesian(layers.DenseVariational, {"units": 3}, (2, 4), (2, 3), trainable=2, masking=True),
    *[_bayesian(getattr(layers, f"Conv{rank}D{estimator}"), {"filters": 3, "kernel_size": 3},
                *CONV[rank])
      for rank in (1, 2, 3) for estimator in ("Flipout", "Reparameterization")],
    # NODE layers: kernel loc and rho, bias loc and rho.
    _bayesian(layers.NodeDense, {"units": 3}, (2, 4), (2, 3), trainable=4, masking=True),
    _bayesian(layers.NodeConv2D, {"filters": 3, "kernel_size": 3}, *CONV[2], trainable=4),
    # Scale loc and rho, Bayesian offset loc and rho.
    _bayesian(layers.BayesianLayerNormalization, {}, (2, 3, 4), (2, 3, 4), trainable=4,
              masking=True),
    # Four Bayesian projections (query, key, value, output): 3 weights, 2
    # non-trainable weights, a seed generator and a KL each. Keras's training
    # step feeds one dict positionally, which attention cannot take (Keras
    # skips it for keras.layers.MultiHeadAttention too); BayesianTransformerBlock
    # trains the same layer below.
    Case(layers.BayesianMultiHeadAttention, {"num_heads": 2, "key_dim": 2, **KL},
         {"query_shape": (2, 3, 4), "value_shape": (2, 3, 4)}, (2, 3, 4), 12, 8, 4, 4, True,
         training_check=False),
    # Attention (4 projections), two Dense feed-forward, two layer norms.
    Case(layers.BayesianTransformerBlock, {"num_heads": 2, "ff_dim": 4, **KL}, (2, 3, 4),
         (2, 3, 4), 26, 16, 8, 8, True),
    Case(layers.MCDropout, {"rate": 0.5, "seed": 0}, (2, 4), (2, 4), 0, 1, 1, 0, True),
    Case(layers.HomoscedasticNoise, {}, (2, 3), (2, 6), 1, 0, 0, 0, False),
    Case(layers.TargetScaling, {"mean": 35.8, "std": 16.7, "output": "mean_log_variance"},
         (2, 2), (2, 2), 0, 0, 0, 0, False, training_check=False),
    Case(layers.HeteroscedasticRegression, {"units": 2}, (2, 4), (2, 4), 2, 0, 0, 0, False),
    Case(layers.HeteroscedasticClassification, {"num_classes": 3, "num_samples": 4, "seed": 0},
         (2, 4), (2, 3), 2, 0, 1, 0, False),
    _head(layers.IndependentNormal, {"event_shape": (2,)}, 4, (2, 2)),
    _head(layers.IndependentLogistic, {"event_shape": (2,)}, 4, (2, 2)),
    _head(layers.IndependentBernoulli, {"event_shape": (2,)}, 2, (2, 2)),
    _head(layers.IndependentPoisson, {"event_shape": (2,)}, 2, (2, 2)),
    _head(layers.Categorical, {"num_classes": 3}, 3, (2,)),
    _head(layers.OneHotCategorical, {"event_size": 3}, 3, (2, 3)),
    _head(layers.MultivariateNormalTriL, {"event_size": 2}, 5, (2, 2)),
    # Mixtures: the mixture's and its component layer's seed generators.
    _head(layers.MixtureNormal, {"num_components": 2, "event_shape": (2,)},
          layers.MixtureNormal.params_size(2, (2,)), (2, 2), seeds=2),
    _head(layers.MixtureLogistic, {"num_components": 2, "event_shape": (2,)},
          layers.MixtureLogistic.params_size(2, (2,)), (2, 2), seeds=2),
    _head(layers.MixtureSameFamily,
          {"num_components": 2, "component_layer": layers.IndependentNormal((2,))},
          layers.MixtureSameFamily.params_size(2, layers.IndependentNormal.params_size((2,))),
          (2, 2), seeds=2),
    _head(layers.DistributionLambda, {"make_distribution_fn": laplace_head}, 2, (2, 1)),
    # Prior mean, noise, inducing points, variational loc and scale, the kernel's
    # amplitude and length scale; a GP over the batch of 1-D inputs.
    Case(layers.VariationalGaussianProcess,
         {"num_inducing_points": 3, "kernel_provider": "exponentiated_quadratic", "seed": 0},
         (2, 1), (2, 1), 7, 0, 1, 0, False),
    # beta and its L2 loss; the sampling switch, the random features' W and b, the
    # precision P. No seed: a plain call is the posterior mean, deterministic (its draws
    # are tested in tests/layers/gaussian_process/test_random_feature_gaussian_process.py).
    Case(layers.RandomFeatureGaussianProcess, {"units": 3, "num_inducing": 8}, (2, 4), (2, 3),
         1, 4, 1, 1, False),
    # The wrapped Dense's kernel and bias; the power iteration's vector u.
    Case(layers.SpectralNormalization,
         {"layer": keras.layers.Dense(3), "norm_multiplier": 0.9}, (2, 4), (2, 3), 2, 1, 0, 0,
         False),
    # Cheap ensembles (tests/layers/ensemble), deterministic: BatchEnsemble's shared kernel,
    # input and output fast weights and per-member bias, on a batch of 2 tiles (2 members);
    # the packed layers' grouped kernel and bias; the tiling layers have no weights.
    Case(layers.BatchEnsembleDense, {"units": 3, "num_members": 2}, (4, 4), (4, 3), 4, 0, 0, 0,
         True),
    Case(layers.BatchEnsembleConv2D, {"filters": 3, "kernel_size": 3, "num_members": 2},
         (4, 5, 5, 2), (4, 3, 3, 3), 4, 0, 0, 0, False),
    Case(layers.EnsembleTile, {"num_members": 2}, (2, 4), (4, 4), 0, 0, 0, 0, False),
    Case(layers.EnsembleUntile, {"num_members": 2}, (4, 3), (2, 2, 3), 0, 0, 0, 0, False),
    Case(layers.PackedDense, {"units": 4, "num_members": 2}, (2, 4), (2, 8), 2, 0, 0, 0, True),
    Case(layers.PackedConv2D, {"filters": 2, "kernel_size": 3, "num_members": 2},
         (2, 5, 5, 4), (2, 3, 3, 4), 2, 0, 0, 0, False),
    Case(layers.PackedOutput, {"num_members": 2}, (2, 6), (2, 2, 3), 0, 0, 0, 0, False),
]

def _params(cases):
    return [pytest.param(case, id=case.id) for case in cases]


def _run(case, init=None, **overrides):
    kwargs = dict(
        input_shape=case.input_shape,
        expected_output_shape=case.output_shape,
        expected_num_trainable_weights=case.trainable,
        expected_num_non_trainable_weights=case.non_trainable,
        expected_num_non_trainable_variables=case.non_trainable + case.seeds,
        expected_num_seed_generators=case.seeds,
        expected_num_losses=case.losses,
        supports_masking=case.masking,
        run_training_check=case.training_check and not case.shared,
        run_mixed_precision_check=not case.shared,
    )
    kwargs.update(overrides)
    testing.TestCase().run_layer_test(case.cls, init or case.init, **kwargs)


def test_every_public_layer_has_a_case():
    public = {getattr(layers, name) for name in layers.__all__}  # aliases: one class
    public = {cls for cls in public if isinstance(cls, type)
              and issubclass(cls, keras.layers.Layer)}
    covered = [case.cls for case in CASES]
    assert len(covered) == len(set(covered))
    assert set(covered) == public - BASES - OWN_HARNESS


@pytest.mark.parametrize("case", _params(CASES))
def test_keras_run_layer_test(case):
    _run(case)


@pytest.mark.parametrize("case", _params(
    [case for case in CASES if case.cls not in SHARED_DTYPE_AND_SEED]))
def test_float64_policy(case):
    shape = case.input_shape
    dtype = ({key: "float64" for key in shape} if isinstance(shape, dict) else "float64")
    _run(case, init={**case.init, "dtype": "float64"}, input_dtype=dtype,
         expected_output_dtype="float64", run_training_check=False,
         run_mixed_precision_check=False)


def _inputs(case, seed=7):
    rng = np.random.default_rng(seed)
    if isinstance(case.input_shape, dict):
        return {key[: -len("_shape")]: rng.normal(size=shape).astype("float32")
                for key, shape in case.input_shape.items()}
    return rng.normal(size=case.input_shape).astype("float32")


def _call(layer, x):
    return np.asarray(layer(**x) if isinstance(x, dict) else layer(x))


SEEDED = [case for case in CASES if "seed" in case.init and case.cls not in SHARED_DTYPE_AND_SEED]


@pytest.mark.parametrize("case", _params(SEEDED))
def test_same_seed_same_output_other_seed_other_output(case):
    x = _inputs(case)
    first, twin, other = (case.cls(**{**case.init, "seed": seed}) for seed in (0, 0, 1))
    for layer in (first, twin, other):
        _call(layer, x)  # builds; every layer has drawn once
    # Equal weights, so only the seed can make the outputs differ.
    twin.set_weights(first.get_weights())
    other.set_weights(first.get_weights())
    a, b, c = _call(first, x), _call(twin, x), _call(other, x)
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c), "a different seed drew the same noise"
    assert not np.array_equal(a, _call(first, x)), "a second call repeated the first draw"
