"""EmbeddingReparameterization: one sampled embedding matrix per call, Keras's masking.

Training with `KLScheduler` and the `.keras` round trip under safe_mode run
with this layer in front of a Bayesian LSTM
(tests/layers/recurrent/test_lstm_cell_reparameterization.py::test_fit_with_kl_scheduler_and_save);
on JAX, one short `fit` and the round trip run here. The tests marked `jax`
run unchanged on both backends.
"""

import keras
import numpy as np
import pytest
from keras.src import testing

from tfp_bnn._substrate import tfd
from tfp_bnn.layers import EmbeddingReparameterization
from tfp_bnn.layers._tracing import sample_trace
from tfp_bnn.modes import set_mean_mode
from tfp_bnn.testing.layer_test import check_fit_and_save

TOKENS = np.array([[1, 2, 0, 0], [3, 1, 4, 0]])


def _np(x):
    return keras.ops.convert_to_numpy(x)


def _layer(**kwargs):
    layer = EmbeddingReparameterization(5, 3, mask_zero=True, kl_weight=0.1, seed=0, **kwargs)
    layer.build()
    return layer


def test_keras_harness():
    # Weights: loc and rho; kl_weight and the sampling switch; one seed generator, one KL.
    # Its training step is left to the compiled `fit` of the LSTM cell's test (see above).
    # (On JAX the KL tracker adds its total and count: 5 non-trainable variables.)
    state = 3 + (2 if keras.backend.backend() == "jax" else 0)
    testing.TestCase().run_layer_test(
        EmbeddingReparameterization,
        {"input_dim": 5, "output_dim": 4, "mask_zero": True, "kl_weight": 0.1, "seed": 0},
        input_shape=(2, 3), input_dtype="int32", expected_output_shape=(2, 3, 4),
        expected_num_trainable_weights=2, expected_num_non_trainable_weights=2,
        expected_num_non_trainable_variables=state, expected_num_seed_generators=1,
        expected_num_losses=1, supports_masking=True, run_training_check=False)


def _pooled(embedding):
    """Embedding -> masked mean over the positions, which reads the mask."""
    return keras.Sequential([keras.Input((TOKENS.shape[1],), dtype="int32"), embedding,
                             keras.layers.GlobalAveragePooling1D()])


@pytest.mark.jax
def test_mean_mode_and_mask_match_keras_embedding():
    layer = _layer()
    reference = keras.layers.Embedding(5, 3, mask_zero=True)
    reference.build()
    reference.embeddings.assign(layer.kernel_params[0])
    set_mean_mode(layer)
    np.testing.assert_array_equal(_np(layer(TOKENS)), _np(reference(TOKENS)))
    np.testing.assert_array_equal(_np(layer.compute_mask(TOKENS)),
                                  _np(reference.compute_mask(TOKENS)))
    assert EmbeddingReparameterization(5, 3).compute_mask(TOKENS) is None
    # The mask reaches the next layer as Keras' own does: the pooled means skip
    # the padding (an unmasked mean over all 4 positions would differ).
    ours, keras_pooled = _np(_pooled(layer)(TOKENS)), _np(_pooled(reference)(TOKENS))
    np.testing.assert_allclose(ours, keras_pooled, rtol=1e-6)
    rows = _np(reference.embeddings)[TOKENS]
    np.testing.assert_allclose(ours[0], rows[0, :2].mean(axis=0), rtol=1e-6)
    assert not np.allclose(ours[0], rows[0].mean(axis=0))


@pytest.mark.jax
def test_one_matrix_per_call_and_its_kl():
    layer = _layer()
    first, second = _np(layer(TOKENS)), _np(layer(TOKENS))
    # Token 1 at two places of the batch reads the same row of the call's sample.
    np.testing.assert_array_equal(first[0, 0], first[1, 1])
    assert not np.allclose(first, second)
    # One closed-form KL over the whole matrix against the N(0, 1) prior, times kl_weight.
    posterior = layer.embeddings_posterior
    assert posterior.event_shape == layer.embeddings_prior.event_shape == (5, 3)
    kl = keras.ops.sum(tfd.kl_divergence(posterior.distribution, tfd.Normal(0.0, 1.0)))
    assert len(layer.losses) == 1
    np.testing.assert_allclose(float(layer.losses[0]), 0.1 * float(kl), rtol=1e-5)


@pytest.mark.jax
def test_seeded_layers_draw_the_same_matrices():
    outputs = []
    for seed in (3, 3, 4):
        layer = EmbeddingReparameterization(5, 3, kl_weight=0.1, seed=seed)
        outputs.append([_np(layer(TOKENS)) for _ in range(2)])
    np.testing.assert_array_equal(outputs[0], outputs[1])
    assert not np.array_equal(outputs[0][0], outputs[0][1])  # a new draw per call
    assert not np.array_equal(outputs[0][0], outputs[2][0])  # another seed


@pytest.mark.jax
def test_fit_and_keras_round_trip():
    # One compiled `fit` step changes every weight; mean-mode outputs survive
    # a .keras round trip under safe_mode.
    model = _pooled(EmbeddingReparameterization(5, 3, mask_zero=True, kl_weight=0.1, seed=1))
    model.add(keras.layers.Dense(1))
    y = np.array([[1.0], [-1.0]], "float32")
    check_fit_and_save(model, TOKENS, y)


@pytest.mark.jax
def test_sample_trace_applies_one_sample_per_tile():
    layer = _layer()
    means = _np(layer.kernel_params[0])
    draws = (keras.ops.convert_to_tensor(np.stack([means, means + 1.0])), None)
    with sample_trace(2, {id(layer): draws}):
        tiled = _np(layer(np.concatenate([TOKENS, TOKENS]), training=False))
    expected = np.take(means, TOKENS, axis=0)
    np.testing.assert_allclose(tiled[:2], expected)
    np.testing.assert_allclose(tiled[2:], expected + 1.0)


def test_float_indices_and_float64_policy():
    layer = EmbeddingReparameterization(5, 3, dtype="float64", seed=0)
    out = layer(TOKENS.astype("float32"))
    assert keras.backend.standardize_dtype(out.dtype) == "float64" and out.shape == (2, 4, 3)


@pytest.mark.parametrize("kwargs, message", [
    ({"input_dim": 0, "output_dim": 2}, "input_dim"),
    ({"input_dim": 3, "output_dim": 2.5}, "output_dim"),
    ({"input_dim": 3, "output_dim": 2, "mask_zero": 1}, "mask_zero")])
def test_bad_arguments_name_themselves(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        EmbeddingReparameterization(**kwargs)
