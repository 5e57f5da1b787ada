"""`.keras` files saved by an earlier release still load and give the same outputs.

The files in `stored/` were written by tfp_bnn 0.1.0 on the TensorFlow
backend (Keras 3.15, before the layers were ported to `keras.ops`), together
with the mean-mode outputs of each model on fixed inputs; `vocabulary` was
written later by the same release, before DenseVariational stored
`kl_estimator` and the node layers took posterior objects. Loading them with
today's code under `safe_mode` must rebuild the same layers by their
registered names and reproduce those outputs: a renamed class, a changed
config key or a changed weight layout fails here.

`python tests/integration/test_stored_keras_files.py` writes the files of a
new release next to them (it refuses to overwrite one).
"""

import json
import pathlib
import sys

import keras
import numpy as np
import pytest

import tfp_bnn

STORED = pathlib.Path(__file__).with_name("stored")
RELEASE = "0.1.0"


def _regression_model():
    inputs = keras.Input((6,))
    h = tfp_bnn.layers.DenseFlipout(16, activation="relu", kl_weight=1e-3, seed=1)(inputs)
    h = tfp_bnn.layers.DenseReparameterization(16, activation="tanh", kl_weight=1e-3,
                                               bayesian_bias=True, seed=2)(h)
    h = tfp_bnn.layers.DenseLocalReparameterization(8, activation="relu", kl_weight=1e-3,
                                                    seed=3)(h)
    outputs = tfp_bnn.layers.HeteroscedasticRegression(1)(h)
    return keras.Model(inputs, outputs, name="regression")


def _sequence_model():
    inputs = keras.Input((7,), dtype="int32")
    h = tfp_bnn.layers.EmbeddingReparameterization(20, 8, kl_weight=1e-3, seed=5)(inputs)
    h = tfp_bnn.layers.Conv1DFlipout(8, 3, padding="same", activation="relu",
                                     kl_weight=1e-3, seed=6)(h)
    h = keras.layers.RNN(tfp_bnn.layers.LSTMCellFlipout(6, kl_weight=1e-3, seed=7))(h)
    outputs = tfp_bnn.layers.DenseFlipout(3, kl_weight=1e-3, seed=8)(h)
    return keras.Model(inputs, outputs, name="sequence")


def _vocabulary_model():
    # The arguments whose spelling changed after 0.1.0: DenseVariational's
    # `kl_use_exact` (now stored as `kl_estimator`), the node layers'
    # posterior names with `flows`/`flow_length` (now `NodeFlow` objects).
    inputs = keras.Input((6,))
    h = tfp_bnn.layers.DenseVariational(8, activation="tanh", kl_use_exact=True,
                                        kl_weight=1e-3, seed=9)(inputs)
    h = tfp_bnn.layers.NodeDense(8, activation="relu", noise="both", posterior="flow",
                                 flows=["planar", "radial"], flow_length=2, num_components=2,
                                 kl_weight=1e-3, seed=10)(h)
    outputs = tfp_bnn.layers.NodeDense(2, posterior="gaussian", kl_weight=1e-3, seed=11)(h)
    return keras.Model(inputs, outputs, name="vocabulary")


def _inputs(name):
    rng = np.random.default_rng(20261129)
    if name in ("regression", "vocabulary"):
        return rng.normal(size=(5, 6)).astype("float32")
    return rng.integers(0, 20, size=(5, 7)).astype("int32")


BUILDERS = {"regression": _regression_model, "sequence": _sequence_model,
            "vocabulary": _vocabulary_model}


def _mean_outputs(model, x):
    tfp_bnn.set_mean_mode(model)
    out = model.predict(x, verbose=0)
    return np.asarray(out)


def write_release(release):
    folder = STORED / release
    folder.mkdir(parents=True, exist_ok=False)
    for name in BUILDERS:
        write_model(folder, name)


def write_model(folder, name):
    """Saves model `name` of `BUILDERS` and its mean-mode outputs in `folder`."""
    if (folder / f"{name}.keras").exists():
        raise FileExistsError(folder / f"{name}.keras")
    build = BUILDERS[name]
    keras.utils.set_random_seed(0)
    model = build()
    x = _inputs(name)
    model.predict(x, verbose=0)
    # Move the posteriors off their initial values, so the files hold
    # weights no fresh model would have.
    for weight in model.trainable_weights:
        weight.assign(weight + 0.01 * np.arange(np.prod(weight.shape), dtype="float32")
                      .reshape(weight.shape) / max(1, np.prod(weight.shape)))
    model.save(folder / f"{name}.keras")
    (folder / f"{name}.json").write_text(json.dumps(
        {"keras": keras.__version__, "backend": keras.backend.backend(),
         "outputs": _mean_outputs(model, x).tolist()}, indent=1) + "\n")


# The regression model's layers run on both backends: its TensorFlow-saved
# file must load on JAX too. The sequence model's (convolution, embedding,
# LSTM cell) run on TensorFlow only so far.
@pytest.mark.parametrize("name", [pytest.param("regression", marks=pytest.mark.jax), "sequence",
                                  "vocabulary"])
def test_stored_file_loads_under_safe_mode_and_predicts_as_saved(name):
    path = STORED / RELEASE / f"{name}.keras"
    expected = json.loads(path.with_suffix(".json").read_text())
    model = keras.saving.load_model(path, safe_mode=True)
    assert [type(layer).__name__ for layer in model.layers] == [
        type(layer).__name__ for layer in BUILDERS[name]().layers]
    got = _mean_outputs(model, _inputs(name))
    np.testing.assert_allclose(got, np.asarray(expected["outputs"], "float32"),
                               rtol=1e-5, atol=1e-6)


@pytest.mark.jax
def test_stored_files_hold_trained_not_initial_weights():
    # The check above would pass with a file that kept fresh weights if the
    # loader ignored them; the stored outputs differ from a fresh model's.
    keras.utils.set_random_seed(0)
    fresh = _regression_model()
    expected = json.loads((STORED / RELEASE / "regression.json").read_text())["outputs"]
    assert not np.allclose(_mean_outputs(fresh, _inputs("regression")), expected, atol=1e-3)


if __name__ == "__main__":
    write_release(sys.argv[1] if len(sys.argv) > 1 else RELEASE)
