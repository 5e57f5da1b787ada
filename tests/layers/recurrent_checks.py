"""Checks the variational LSTM and GRU cells share.

tests/layers/test_lstm_cell_reparameterization.py and
test_gru_cell_reparameterization.py run each of them on their cell, which
also covers the shared base `tfp_bnn/layers/_recurrent_cell.py`.
"""

import keras
import numpy as np
import tensorflow as tf
from keras.src import testing

from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import EmbeddingReparameterization
from tfp_bnn.layers._tracing import sample_trace
from tfp_bnn.modes import set_mean_mode
from tfp_bnn.testing.layer_test import check_fit_and_save

KL = {"kl_weight": 0.1, "seed": 0}
UNITS = 3
# Three sequences of 6 steps, 4 features; valid lengths 6, 4 and 2 (the rest padding).
X = np.random.default_rng(0).normal(size=(3, 6, 4)).astype("float32")
MASK = np.arange(6)[None, :] < np.array([6, 4, 2])[:, None]


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def check_keras_harness(cell_cls):
    """Keras 3's `run_layer_test` on `keras.layers.RNN(cell)`, as Keras tests its own cells.

    Weights: kernel loc and rho, recurrent kernel loc and rho, a point bias;
    non-trainable: kl_weight and the sampling switch; one seed generator; one
    KL loss; the mixed_float16 policy. Its training step is left to the
    compiled `fit` of `check_fit_and_save_with_embedding`.
    """
    testing.TestCase().run_layer_test(
        keras.layers.RNN, {"cell": cell_cls(UNITS, **KL)}, input_shape=(2, 3, 4),
        expected_output_shape=(2, UNITS), expected_num_trainable_weights=5,
        expected_num_non_trainable_weights=2, expected_num_non_trainable_variables=3,
        expected_num_seed_generators=1, expected_num_losses=1, supports_masking=True,
        run_training_check=False)


def check_kl_once_per_pass(cell_cls, traced=False):
    """A 1-step and a 10-step pass: one KL term each, equal values.

    With the closed-form KL the term depends on the weights only, so the two
    values agree to float precision. The seed generator advances as much for
    10 steps as for 1: the weights are drawn once per pass, not per step.
    With `traced`, the 10-step pass runs in a `tf.function` (the RNN's
    `tf.while_loop`, where a draw per step would advance the seed each step).
    """
    cell = cell_cls(UNITS, **KL)
    rnn = keras.layers.RNN(cell)

    def losses(x):
        rnn(x, training=True)
        return rnn.losses

    results = []
    for run, x in ((losses, X[:, :1]), (tf.function(losses) if traced else losses,
                                        np.tile(X[:, :1], (1, 10, 1)))):
        before = cell.seed_generator.state.numpy().copy()
        terms = run(x)
        advance = cell.seed_generator.state.numpy() - before
        results.append((len(terms), float(terms[0]), tuple(advance)))
    (count_1, kl_1, advance_1), (count_10, kl_10, advance_10) = results
    assert count_1 == count_10 == 1
    np.testing.assert_allclose(kl_10, kl_1, rtol=1e-6)
    assert advance_1 == advance_10 and any(advance_1)


def _mean_weights(cell):
    bias = cell.bias if cell.bias_params is None else cell.bias_params[0]
    return [_numpy(cell.kernel_params[0]), _numpy(cell.recurrent_kernel_params[0]),
            _numpy(bias)]


def check_matches_keras(cell_cls, keras_rnn_cls, **cell_kwargs):
    """In mean mode `RNN(cell)` is `keras_rnn_cls` with W, U, b = posterior means.

    Outputs at every step, final states, masking and go_backwards, to float
    tolerance: the gates are Keras's. Also: a padded sequence gives the
    output of its unpadded prefix.
    """
    flags = dict(return_sequences=True, return_state=True, go_backwards=True)
    rnn = keras.layers.RNN(cell_cls(UNITS, **cell_kwargs, **KL), **flags)
    keras_kwargs = {key: value for key, value in cell_kwargs.items() if key != "bayesian_bias"}
    reference = keras_rnn_cls(UNITS, **keras_kwargs, **flags)
    rnn.build(X.shape)
    reference.build(X.shape)
    reference.set_weights(_mean_weights(rnn.cell))
    set_mean_mode(rnn)
    ours, theirs = rnn(X, mask=MASK), reference(X, mask=MASK)
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(_numpy(a), _numpy(b), rtol=1e-5, atol=1e-6)
    rnn.go_backwards = False
    padded = rnn(X[1:2], mask=MASK[1:2])[0]
    prefix = rnn(X[1:2, :4])[0]
    np.testing.assert_allclose(_numpy(padded)[:, -1], _numpy(prefix)[:, -1], atol=1e-6)


def check_masking_within_a_pass(cell_cls):
    """While sampling, a masked step repeats the last valid output (Keras's rule)."""
    rnn = keras.layers.RNN(cell_cls(UNITS, **KL), return_sequences=True)
    out = _numpy(rnn(X, mask=MASK, training=True))
    for row, length in enumerate((6, 4, 2)):
        for step in range(length, 6):
            np.testing.assert_array_equal(out[row, step], out[row, length - 1])
    assert not np.allclose(out[0, 1], out[0, 0])


def check_sample_trace(cell_cls, keras_rnn_cls):
    """Inside `tfp_bnn.predict`'s `sample_trace`, tile s of the rows runs on weight sample s.

    Two given samples, the posterior means and the means shifted by 0.1:
    each tile equals the Keras layer with that sample's weights.
    """
    rnn = keras.layers.RNN(cell_cls(UNITS, **KL))
    rnn.build(X.shape)
    means = _mean_weights(rnn.cell)
    shifted = [w + 0.1 for w in means]
    draws = (tf.stack([means[0], shifted[0]]), tf.stack([means[1], shifted[1]]), None)
    kernels, recurrent, biases = rnn.cell.predictive_samples(2)
    assert kernels.shape[0] == recurrent.shape[0] == 2 and biases is None
    with sample_trace(2, {id(rnn.cell): draws}):
        tiled = _numpy(rnn(np.concatenate([X, X]), training=False))
    reference = keras_rnn_cls(UNITS)
    reference.build(X.shape)
    # The deterministic bias is the same in both samples.
    for tile, weights in enumerate((means, shifted[:2] + means[2:])):
        reference.set_weights(weights)
        np.testing.assert_allclose(tiled[tile * 3:(tile + 1) * 3], _numpy(reference(X)),
                                   rtol=1e-5, atol=1e-6)


def check_fit_and_save_with_embedding(cell_cls):
    """Embedding(mask_zero) -> RNN(cell) -> Dense trained with `KLScheduler` on a tiny task.

    The task: y = sum over the valid steps of (token - 2.5), tokens 1..4, 0
    padding. Over 12 epochs (24 steps) the data term (`data_loss`, the loss
    minus the KL) must fall below half its first-epoch value, every trainable
    variable must move, and the mean-mode outputs must survive a `.keras`
    round trip under `safe_mode=True`.
    """
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 5, size=(32, 5)) * (np.arange(5) < rng.integers(1, 6, (32, 1)))
    y = (np.where(tokens > 0, tokens - 2.5, 0.0).sum(axis=1, keepdims=True)).astype("float32")
    model = keras.Sequential([
        keras.Input((5,), dtype="int32"),
        EmbeddingReparameterization(5, 4, mask_zero=True, seed=0),
        keras.layers.RNN(cell_cls(4, seed=1)),
        keras.layers.Dense(1)])
    history = check_fit_and_save(model, tokens, y, epochs=12, batch_size=16, learning_rate=0.05,
                                 callbacks=[KLScheduler(num_examples=len(y))])
    data = history.history["data_loss"]
    assert data[-1] < 0.5 * data[0], data
