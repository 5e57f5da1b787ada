"""Checks the variational LSTM and GRU cells share.

tests/layers/recurrent/test_{lstm,gru}_cell_{reparameterization,flipout}.py run each
of them on their cell, which also covers the shared modules
`tfp_bnn/layers/recurrent/_recurrent_cell.py` and `_recurrent_gates.py`; the
`check_flipout_*` checks are the Flipout cells' own. The checks that run on
every Keras backend (the test files mark them `jax`) use `keras.ops` only;
`check_kl_once_per_pass(traced=True)` and `check_flipout_variance` trace
with `tf.function` and stay on TensorFlow.
"""

from unittest import mock

import keras
import numpy as np
import tensorflow as tf
from keras.src import testing

from tfp_bnn.callbacks import KLScheduler
from tfp_bnn.layers import EmbeddingReparameterization
from tfp_bnn.layers._tracing import no_kl_trace
from tfp_bnn.layers.recurrent._recurrent_cell import FlipoutKernel
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


def _seed_state(cell):
    return keras.ops.convert_to_numpy(cell.seed_generator.state).copy()


def check_keras_harness(cell_cls):
    """Keras 3's `run_layer_test` on `keras.layers.RNN(cell)`, as Keras tests its own cells.

    Weights: kernel loc and rho, recurrent kernel loc and rho, a point bias;
    non-trainable: kl_weight and the sampling switch; one seed generator (and
    on JAX the KL tracker's total and count, which the compiled steps carry
    there); one KL loss; the mixed_float16 policy. Its training step is left
    to the compiled `fit` of `check_fit_and_save_with_embedding`.
    """
    state = 3 + (2 if keras.backend.backend() == "jax" else 0)
    testing.TestCase().run_layer_test(
        keras.layers.RNN, {"cell": cell_cls(UNITS, **KL)}, input_shape=(2, 3, 4),
        expected_output_shape=(2, UNITS), expected_num_trainable_weights=5,
        expected_num_non_trainable_weights=2, expected_num_non_trainable_variables=state,
        expected_num_seed_generators=1, expected_num_losses=1, supports_masking=True,
        run_training_check=False)


def check_kl_once_per_pass(cell_cls, traced=False):
    """A 1-step and a 10-step pass: one KL term each, equal values.

    With the closed-form KL the term depends on the weights only, so the two
    values agree to float precision. The seed generator advances as much for
    10 steps as for 1: the weights are drawn once per pass, not per step.
    With `traced`, the 10-step pass runs in a `tf.function` (the RNN's
    `tf.while_loop`, where a draw per step would advance the seed each step;
    TensorFlow only, `check_kl_once_per_compiled_step` is the check for
    every backend).
    """
    cell = cell_cls(UNITS, **KL)
    rnn = keras.layers.RNN(cell)

    def losses(x):
        rnn(x, training=True)
        return rnn.losses

    results = []
    for run, x in ((losses, X[:, :1]), (tf.function(losses) if traced else losses,
                                        np.tile(X[:, :1], (1, 10, 1)))):
        before = _seed_state(cell)
        terms = run(x)
        advance = _seed_state(cell) - before
        results.append((len(terms), float(terms[0]), tuple(advance)))
    (count_1, kl_1, advance_1), (count_10, kl_10, advance_10) = results
    assert count_1 == count_10 == 1
    np.testing.assert_allclose(kl_10, kl_1, rtol=1e-6)
    assert advance_1 == advance_10 and any(advance_1)


def _zero_data_loss(y_true, y_pred):
    # The model's loss is then its KL terms alone.
    return 0.0 * keras.ops.mean(y_pred, axis=-1)


def _analytic_kl(cell):
    """KL(N(loc, softplus(rho)^2) || N(0, 1)) over kernel and recurrent kernel, in NumPy."""
    kl = 0.0
    for loc, rho in (cell.kernel_params, cell.recurrent_kernel_params):
        loc = _numpy(loc).astype("float64")
        scale = np.logaddexp(0.0, _numpy(rho).astype("float64"))
        kl += float(np.sum(0.5 * (scale**2 + loc**2 - 1.0) - np.log(scale)))
    return kl


def check_kl_once_per_compiled_step(cell_cls):
    """In a compiled `fit` step over 10-step sequences the loss is kl_weight * KL once.

    The data loss is zero and the learning rate 0, so the step's loss is the
    KL terms alone: the closed form of the cell's posterior, computed here in
    NumPy, once, not once per time step. The RNN's loop is traced there (a
    `tf.while_loop`, or on JAX a `jax.lax.scan`, whose body cannot hand a
    loss out): the cell adds its KL before the loop, where it draws the
    pass's weights.
    """
    model = keras.Sequential([keras.Input((10, 4)), keras.layers.RNN(cell_cls(UNITS, **KL))])
    model.compile(keras.optimizers.SGD(0.0), _zero_data_loss)
    expected = KL["kl_weight"] * _analytic_kl(model.layers[0].cell)
    x = np.tile(X[:, :1], (1, 10, 1))
    loss = model.fit(x, np.zeros((3, UNITS), "float32"), batch_size=3, verbose=0)
    np.testing.assert_allclose(loss.history["loss"][-1], expected, rtol=1e-5)


def check_seeded_determinism(cell_cls):
    """Cells with the same seed give the same passes; each call draws anew; seeds differ.

    The first cell runs two passes, the others one (each eager pass on JAX
    compiles its loop anew).
    """
    outputs = []
    for seed, passes in ((7, 2), (7, 1), (8, 1)):
        rnn = keras.layers.RNN(cell_cls(UNITS, kl_weight=0.1, seed=seed))
        outputs.append([_numpy(rnn(X, training=True)) for _ in range(passes)])
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])
    assert not np.allclose(outputs[0][0], outputs[0][1])  # a new draw per pass
    assert not np.allclose(outputs[0][0], outputs[2][0])  # another seed


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
        keras.layers.RNN(cell_cls(UNITS, seed=1)),
        keras.layers.Dense(1)])
    history = check_fit_and_save(model, tokens, y, epochs=12, batch_size=16, learning_rate=0.05,
                                 callbacks=[KLScheduler(num_examples=len(y))])
    data = history.history["data_loss"]
    assert data[-1] < 0.5 * data[0], data


def _row_kernel(kernel, row):
    """Row `row`'s kernel in a pass: the sample, or Flipout's loc + delta * (s_row r_row^T)."""
    if not isinstance(kernel, FlipoutKernel):
        return _numpy(kernel)
    loc, delta = _numpy(kernel.loc), _numpy(kernel.delta)
    return loc + delta * np.outer(_numpy(kernel.sign_in)[row], _numpy(kernel.sign_out)[row])


def check_one_draw_for_all_steps(cell_cls, keras_rnn_cls, **cell_kwargs):
    """A sampling pass of `RNN(cell)` draws its weights once and runs every step on them.

    The pass's draw is recorded (the cell makes exactly one per pass); every
    output step of every row must be the Keras layer's with that row's
    weights (Flipout: W_n = loc + delta * (s_n r_n^T), U_n alike), so no step
    ran on other noise. The rows are masked to lengths 6, 4, 2 on both sides:
    masked steps follow Keras's rule while sampling. For Flipout the rows'
    weights also differ.
    """
    flags = dict(return_sequences=True)
    rnn = keras.layers.RNN(cell_cls(UNITS, **cell_kwargs, **KL), **flags)
    rnn.build(X.shape)
    cell = rnn.cell
    draws = []
    draw_pass = cell._draw_pass

    def recorded(step_input, training):
        draws.append(draw_pass(step_input, training))
        return draws[-1]

    with mock.patch.object(cell, "_draw_pass", recorded):
        ours = _numpy(rnn(X, mask=MASK, training=True))
    assert len(draws) == 1, len(draws)
    drawn = draws[0]
    keras_kwargs = {key: value for key, value in cell_kwargs.items() if key != "bayesian_bias"}
    reference = keras_rnn_cls(UNITS, **keras_kwargs, **flags)
    reference.build(X.shape)

    def row_weights(row):
        return [_row_kernel(drawn.kernel, row), _row_kernel(drawn.recurrent_kernel, row),
                _numpy(drawn.bias)]

    rows = []
    for row in range(len(X)):
        reference.set_weights(row_weights(row))
        rows.append(_numpy(reference(X[row:row + 1], mask=MASK[row:row + 1]))[0])
        np.testing.assert_allclose(ours[row], rows[-1], rtol=1e-5, atol=1e-6)
    if isinstance(drawn.kernel, FlipoutKernel):
        # The rows' weights differ: row 0's weights give row 1 another output.
        reference.set_weights(row_weights(0))
        assert not np.allclose(_numpy(reference(X[1:2]))[0], rows[1], atol=1e-4)


# z-score of the Monte Carlo checks below: a two-sided normal tail of 7e-6 each.
Z = 4.5


def check_flipout_variance(flipout_cls, reparameterization_cls, passes=1000):
    """One step's pre-activation z = x @ W + h @ U of one example: Flipout's per-example
    variance equals the reparameterization estimator's on the same posterior.

    Each estimator runs `passes` training passes (a fresh draw each) on a batch
    of two identical rows. Per output j, row 0's sample variance over the passes
    estimates Var z_j; both estimators must give the analytic
    sum_i x_i^2 sigma_W,ij^2 + sum_k h_k^2 sigma_U,kj^2. With S passes, a
    sample variance of Gaussian z has relative s.e. sqrt(2 / (S - 1)), so a log
    ratio of two estimates has s.e. 2 / sqrt(S - 1); the J outputs are
    independent (given the signs each z_j is Gaussian with a variance free of
    them), so their mean log ratio has s.e. 2 / sqrt((S - 1) J). The bounds are
    Z of these. Flipout's point: within a pass, the two rows' perturbations
    are uncorrelated (reparameterization's are equal); the sample correlation
    has s.e. at most sqrt(3 / S) (the rows share delta, which at most triples
    E[e_0^2 e_1^2] over sigma^4).
    """
    rng = np.random.default_rng(1)
    x = np.repeat(rng.normal(size=(1, 4)), 2, axis=0).astype("float32")
    h = np.repeat(rng.normal(size=(1, UNITS)), 2, axis=0).astype("float32")
    cells = [cls(UNITS, **KL) for cls in (flipout_cls, reparameterization_cls)]
    for cell in cells:
        cell.build((None, 4))
    for source, target in zip(cells[0].weights, cells[1].weights):
        target.assign(source)  # the same posterior for both

    def preactivations(cell):
        @tf.function
        def run():
            out = tf.TensorArray(tf.float32, size=passes)
            with no_kl_trace():
                for i in tf.range(passes):
                    weights = cell._draw_pass(tf.constant(x), training=True)
                    out = out.write(i, cell._project(x, weights.kernel, weights)
                                    + cell._project(h, weights.recurrent_kernel, weights))
            return out.stack()
        return run().numpy().astype(np.float64)  # [S, 2 rows, J]

    flipout, reparameterization = (preactivations(cell) for cell in cells)
    kernel_sd = _numpy(cells[0].kernel_posterior.distribution.stddev())
    recurrent_sd = _numpy(cells[0].recurrent_kernel_posterior.distribution.stddev())
    exact = x[0] ** 2 @ kernel_sd ** 2 + h[0] ** 2 @ recurrent_sd ** 2
    variances = {name: z[:, 0].var(axis=0, ddof=1)
                 for name, z in (("flipout", flipout), ("reparameterization", reparameterization))}
    width = exact.shape[0]
    ratio = np.log(variances["flipout"] / variances["reparameterization"])
    assert np.all(np.abs(ratio) < Z * 2 / np.sqrt(passes - 1)), ratio
    assert abs(ratio.mean()) < Z * 2 / np.sqrt((passes - 1) * width), ratio.mean()
    for name, variance in variances.items():
        assert abs(np.log(variance / exact).mean()) < Z * np.sqrt(2 / ((passes - 1) * width)), (
            name, variance / exact)
    np.testing.assert_array_equal(reparameterization[:, 0], reparameterization[:, 1])
    centred = flipout - flipout.mean(axis=0)
    correlation = (centred[:, 0] * centred[:, 1]).mean(0) / np.sqrt(
        (centred[:, 0] ** 2).mean(0) * (centred[:, 1] ** 2).mean(0))
    assert np.all(np.abs(correlation) < Z * np.sqrt(3 / passes)), correlation
