"""Every public layer declares the output dtype it returns, under every dtype policy.

A functional model is wired from the symbolic output (`compute_output_spec`);
if that says float16 while `call` returns float32, the next layer is built
for the wrong dtype and `keras.Model` reports outputs it never produces.
"""

import keras
import numpy as np
import pytest
import tensorflow_probability as tfp

import tfp_bnn.layers as L

tfd = tfp.distributions

def _kl_prior():
    return tfd.MultivariateNormalDiag(loc=[0.0, 0.0])


# name -> (factory, input shapes); every layer is called on float32 inputs of these shapes.
LAYERS = {
    "DenseFlipout": (lambda: L.DenseFlipout(3, seed=0), [(2, 4)]),
    "DenseReparameterization": (lambda: L.DenseReparameterization(3, seed=0), [(2, 4)]),
    "DenseLocalReparameterization": (lambda: L.DenseLocalReparameterization(3, seed=0),
                                     [(2, 4)]),
    "DenseVariational": (lambda: L.DenseVariational(3, seed=0), [(2, 4)]),
    "Conv1DFlipout": (lambda: L.Conv1DFlipout(2, 3, seed=0), [(2, 5, 2)]),
    "Conv1DReparameterization": (lambda: L.Conv1DReparameterization(2, 3, seed=0),
                                 [(2, 5, 2)]),
    "Conv2DFlipout": (lambda: L.Conv2DFlipout(2, 3, seed=0), [(2, 4, 4, 1)]),
    "Conv2DReparameterization": (lambda: L.Conv2DReparameterization(2, 3, seed=0),
                                 [(2, 4, 4, 1)]),
    "Conv3DFlipout": (lambda: L.Conv3DFlipout(1, 2, seed=0), [(1, 3, 3, 3, 1)]),
    "Conv3DReparameterization": (lambda: L.Conv3DReparameterization(1, 2, seed=0),
                                 [(1, 3, 3, 3, 1)]),
    "BayesianLayerNormalization": (lambda: L.BayesianLayerNormalization(seed=0), [(2, 3, 4)]),
    "BayesianMultiHeadAttention": (lambda: L.BayesianMultiHeadAttention(2, 2, seed=0),
                                   [(2, 3, 4), (2, 3, 4)]),
    "BayesianTransformerBlock": (lambda: L.BayesianTransformerBlock(2, 8, seed=0),
                                 [(2, 3, 4)]),
    "MCDropout": (lambda: L.MCDropout(0.5, seed=0), [(2, 4)]),
    "NodeDense": (lambda: L.NodeDense(3, seed=0), [(2, 4)]),
    "NodeConv2D": (lambda: L.NodeConv2D(2, 3, seed=0), [(2, 4, 4, 1)]),
    "HeteroscedasticClassification": (
        lambda: L.HeteroscedasticClassification(3, num_samples=2, seed=0), [(2, 4)]),
    "HeteroscedasticClassification_moments": (
        lambda: L.HeteroscedasticClassification(3, num_samples=2, seed=0,
                                                return_logit_moments=True), [(2, 4)]),
    "HeteroscedasticRegression": (lambda: L.HeteroscedasticRegression(1), [(2, 4)]),
    "HomoscedasticNoise": (lambda: L.HomoscedasticNoise(), [(2, 1)]),
    "DistributionLambda": (
        lambda: L.DistributionLambda(lambda t: tfd.Normal(t, 1.0), seed=0), [(2, 1)]),
    "Categorical": (lambda: L.Categorical(3, seed=0), [(2, 3)]),
    "OneHotCategorical": (lambda: L.OneHotCategorical(3, seed=0), [(2, 3)]),
    "IndependentBernoulli": (lambda: L.IndependentBernoulli(2, seed=0), [(2, 2)]),
    "IndependentLogistic": (lambda: L.IndependentLogistic(1, seed=0), [(2, 2)]),
    "IndependentNormal": (lambda: L.IndependentNormal(1, seed=0), [(2, 2)]),
    "IndependentPoisson": (lambda: L.IndependentPoisson(1, seed=0), [(2, 1)]),
    "MixtureNormal": (lambda: L.MixtureNormal(2, 1, seed=0), [(2, 6)]),
    "MixtureLogistic": (lambda: L.MixtureLogistic(2, 1, seed=0), [(2, 6)]),
    "MixtureSameFamily": (
        lambda: L.MixtureSameFamily(2, L.IndependentNormal(1), seed=0), [(2, 6)]),
    "MultivariateNormalTriL": (lambda: L.MultivariateNormalTriL(2, seed=0), [(2, 5)]),
    # The KL layers act on a distribution layer's output; the prior is float32 in every policy.
    "KLDivergenceRegularizer": (lambda: L.MultivariateNormalTriL(
        2, seed=0, activity_regularizer=L.KLDivergenceRegularizer(_kl_prior())), [(2, 5)]),
    "KLDivergenceAddLoss": (lambda: keras.Sequential([
        L.MultivariateNormalTriL(2, seed=0), L.KLDivergenceAddLoss(_kl_prior())]), [(2, 5)]),
    # Float inputs in [0.1, 1) are cast to index 0, as keras.layers.Embedding casts them.
    "EmbeddingReparameterization": (lambda: L.EmbeddingReparameterization(5, 3, seed=0),
                                    [(2, 4)]),
    # Cells run inside keras.layers.RNN, the way they are used.
    "GRUCellReparameterization": (
        lambda: keras.layers.RNN(L.GRUCellReparameterization(2, seed=0)), [(2, 3, 4)]),
    "LSTMCellReparameterization": (
        lambda: keras.layers.RNN(L.LSTMCellReparameterization(2, seed=0)), [(2, 3, 4)]),
    "GRUCellFlipout": (lambda: keras.layers.RNN(L.GRUCellFlipout(2, seed=0)), [(2, 3, 4)]),
    "LSTMCellFlipout": (lambda: keras.layers.RNN(L.LSTMCellFlipout(2, seed=0)), [(2, 3, 4)]),
    "VariationalGaussianProcess": (
        lambda: L.VariationalGaussianProcess(3, "exponentiated_quadratic", seed=0), [(2, 1)]),
    "RandomFeatureGaussianProcess": (
        lambda: L.RandomFeatureGaussianProcess(3, num_inducing=8, seed=0), [(2, 4)]),
    "SpectralNormalization": (lambda: L.SpectralNormalization(keras.layers.Dense(3)), [(2, 4)]),
    "TargetScaling": (lambda: L.TargetScaling(35.8, 16.7, output="mean_log_variance"),
                      [(2, 2)]),
    # Two members: the BatchEnsemble layers take M tiles of a batch (rows a multiple of M).
    "EnsembleTile": (lambda: L.EnsembleTile(2), [(2, 4)]),
    "BatchEnsembleDense": (lambda: L.BatchEnsembleDense(3, 2), [(4, 4)]),
    "BatchEnsembleConv2D": (lambda: L.BatchEnsembleConv2D(2, 3, 2), [(4, 4, 4, 1)]),
    "EnsembleUntile": (lambda: L.EnsembleUntile(2), [(4, 3)]),
    "PackedDense": (lambda: L.PackedDense(4, 2, first=True), [(2, 3)]),
    "PackedConv2D": (lambda: L.PackedConv2D(2, 3, 2, first=True), [(2, 4, 4, 1)]),
    "PackedOutput": (lambda: L.PackedOutput(2), [(2, 6)]),
}

# The public layers that are not concrete (abstract bases) and the aliases of listed ones.
NOT_CONCRETE = {"BayesianLayer", "NodeLayer"}


def test_every_public_layer_is_listed():
    listed = {name.split("_")[0] for name in LAYERS}
    public = {name for name in L.__all__ if name not in NOT_CONCRETE
              and isinstance(getattr(L, name), type)  # not functions (mean_field_logits)
              and getattr(L, name).__name__ == name}
    assert public == listed


POLICIES = ["float32", "mixed_float16", "mixed_bfloat16", "float64"]


@pytest.fixture(params=POLICIES)
def policy(request):
    """The global dtype policy for the test (float64: the layers' `dtype` argument path is
    the same policy object), restored afterwards."""
    previous = keras.config.dtype_policy()
    keras.config.set_dtype_policy(request.param)
    yield request.param
    keras.config.set_dtype_policy(previous)


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_symbolic_output_dtype_is_the_eager_one(name, policy):
    factory, shapes = LAYERS[name]
    layer = factory()
    symbolic = layer(*[keras.KerasTensor(shape, dtype="float32") for shape in shapes])
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(0.1, 1.0, shape).astype("float32") for shape in shapes]
    eager = layer(*arrays)
    assert keras.backend.standardize_dtype(eager.dtype) == \
        keras.backend.standardize_dtype(symbolic.dtype), (name, policy)


# --- float64 node layers: z drawn in float64, KL in float32 ------------------------------------

# A batch-norm flow step keeps moving statistics of z; a planar step is the common one.
# (Tracing a fit step through every flow kind costs ~15 s; the kinds share this code path.)
FLOWS = {"posterior": "flow", "flows": ["planar", "batch_norm"], "flow_length": 2}


@pytest.mark.parametrize("cls, shape, kwargs", [
    (L.NodeDense, (4, 5), {"noise": "input"}),
    (L.NodeDense, (4, 5), {"noise": "both", "num_components": 2, **FLOWS}),
    (L.NodeConv2D, (4, 5, 5, 2), {"noise": "both"}),
], ids=["NodeDense_gaussian", "NodeDense_flows_two_components", "NodeConv2D_gaussian"])
def test_float64_node_layers_build_call_and_fit(cls, shape, kwargs):
    args = (3,) if cls is L.NodeDense else (2, 3)
    layer = cls(*args, dtype="float64", kl_weight=0.01, seed=0, **kwargs)
    rng = np.random.default_rng(0)
    x = rng.normal(size=shape)
    y = rng.normal(size=(shape[0], 1))
    model = keras.Sequential([keras.Input(shape[1:], dtype="float64"), layer,
                              keras.layers.Flatten(dtype="float64"),
                              keras.layers.Dense(1, dtype="float64")])
    outputs = layer(x, training=True)
    assert outputs.dtype == "float64" and np.all(np.isfinite(outputs))
    assert [loss.dtype for loss in layer.losses] == ["float32"]
    assert layer.kernel.dtype == "float64" and layer.input_loc.dtype == "float64"
    flows = [f for f in (layer.input_flow, layer.output_flow) if f is not None]
    assert all(f.dtype_policy.name == "float64" for f in flows)
    assert layer.kl_divergence(8).dtype == "float32"
    model.compile("adam", "mse", jit_compile=False)
    # Keras (TF backend, no distribution strategy) would create the optimizer's
    # variables inside the first trace of the train step, and tf.function then
    # traces the step a second time; built here it is traced once, same graph.
    model.optimizer.build(model.trainable_variables)
    before = [np.array(w) for w in layer.trainable_weights]
    history = model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    moved = [not np.array_equal(b, np.array(w)) for b, w in zip(before, layer.trainable_weights)]
    assert all(moved)  # every weight, node posteriors and flows included, got a gradient
