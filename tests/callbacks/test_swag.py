"""SWAG: the moments of the collected iterates, the posterior's draws, the predictive model."""

import keras
import numpy as np
import pytest

import tfp_bnn
from tfp_bnn.callbacks import SWAG
from tfp_bnn.losses import GaussianNLL

EPS32 = float(np.finfo(np.float32).eps)
EPS64 = float(np.finfo(np.float64).eps)
RNG = np.random.default_rng(0)
N = 64
X = RNG.normal(size=(N, 3)).astype("float32")
Y = (X @ np.array([1.0, -2.0, 0.5]) + 0.3 * RNG.normal(size=N)).astype("float32")[:, None]
LABELS = (np.argmax(X, axis=1)).astype("int32")
# The regression run: 16 epochs, and three SWAGs collecting on their own schedules.
EPOCHS = 16
SCHEDULES = {"full": dict(start_epoch=2, collect_every=2, max_rank=3),      # 7 > K: wraps
             "wide": dict(start_epoch=0, collect_every=1, max_rank=20),     # 16 < K
             "diag": dict(start_epoch=1, collect_every=3, diagonal_only=True)}


def flat(variables):
    """The variables' values as one vector, in their dtype."""
    return np.concatenate([np.ravel(keras.ops.convert_to_numpy(v)) for v in variables])


class Snapshots(keras.callbacks.Callback):
    """Every epoch end's trainable weights as one float64 vector, read apart from SWAG."""

    def __init__(self):
        super().__init__()
        self.vectors = []

    def on_epoch_end(self, epoch, logs=None):
        self.vectors.append(flat(self.model.trainable_weights).astype(np.float64))


def collected(snapshots, start_epoch, collect_every=1, **_):
    """The snapshots a schedule takes: epoch ends start_epoch, + collect_every, ..."""
    return np.stack([v for e, v in enumerate(snapshots) if e >= start_epoch
                     and (e - start_epoch) % collect_every == 0])


def mlp(units, seed):
    """3-8-units: Dense(relu), Dense; 24 + 8 + 8 units + units weights."""
    return keras.Sequential([
        keras.Input((3,)),
        keras.layers.Dense(8, activation="relu",
                           kernel_initializer=keras.initializers.GlorotUniform(seed)),
        keras.layers.Dense(units, kernel_initializer=keras.initializers.GlorotUniform(seed + 1))])


def mlp_outputs(vector, units, x=X):
    """The MLP's outputs for a flat weight vector, in float64 NumPy (no Keras)."""
    cuts = np.cumsum([24, 8, 8 * units])
    w1, b1, w2, b2 = np.split(vector, cuts)
    hidden = np.maximum(x.astype(np.float64) @ w1.reshape(3, 8) + b1, 0.0)
    return hidden @ w2.reshape(8, units) + b2


@pytest.fixture(scope="module")
def regression():
    keras.utils.set_random_seed(0)  # the shuffles (a module fixture runs before conftest's)
    model = mlp(2, seed=0)
    model.compile(keras.optimizers.SGD(0.05), GaussianNLL())
    snapshots = Snapshots()
    swags = {name: SWAG(**kwargs) for name, kwargs in SCHEDULES.items()}
    model.fit(X, Y, batch_size=16, epochs=EPOCHS, verbose=0,
              callbacks=[snapshots] + list(swags.values()))
    return model, np.stack(snapshots.vectors), swags


@pytest.mark.jax
def test_moments_of_gradient_descent_on_least_squares_are_those_of_its_iterates():
    # One full-batch SGD step per epoch on L(w) = |X w - y|^2 / N has the closed-form
    # iterates w_t = w* + A^t (w_0 - w*), A = I - lr H, H = 2 X^T X / N, w* = the
    # least-squares solution (their limit): SWAG's moments must be those of w_t over the
    # epochs it collects, up to Keras' float32 rounding, bounded below.
    lr = float(np.float32(0.05))  # the optimizer holds lr in float32
    model = keras.Sequential([keras.Input((3,)),
                              keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")])
    model.compile(keras.optimizers.SGD(lr), "mse")
    schedule = dict(start_epoch=4, collect_every=2)
    swag = SWAG(**schedule, max_rank=3)
    epochs = 30
    model.fit(X, Y, batch_size=N, epochs=epochs, shuffle=False, verbose=0, callbacks=[swag])

    x, y = X.astype(np.float64), Y.astype(np.float64)
    w_star = np.linalg.lstsq(x, y, rcond=None)[0][:, 0]
    step = np.eye(3) - lr * 2.0 * x.T @ x / N
    iterates = [w_star + np.linalg.matrix_power(step, t) @ -w_star for t in range(epochs + 1)]
    # Keras' float32 step: residuals r = X w - y (3 products), gradient 2 X^T r / N (N terms),
    # w - lr g; each rounding <= n eps sum|terms| (n the terms), and A contracts
    # (||A||_2 < 1), so the error in w_t is at most the sum of the steps' roundings.
    assert np.linalg.norm(step, 2) < 1
    rounding = 0.0
    for w in iterates[:-1]:
        terms = np.abs(x) @ np.abs(w) + np.abs(y[:, 0])
        residual_error = 4 * EPS32 * terms
        gradient = 2.0 / N * np.abs(x).T @ (residual_error + (N + 1) * EPS32 * terms)
        error = lr * gradient + 2 * EPS32 * (np.abs(w) + lr * 2.0 / N * np.abs(x).T @ terms)
        rounding += np.linalg.norm(error)  # ||e_t+1|| <= ||A|| ||e_t|| + ||rounding_t||
    taken = collected(iterates[1:], **schedule)  # epoch e ends with w_(e+1)
    assert swag.num_collected == len(taken) == 13
    np.testing.assert_allclose(swag.mean, taken.mean(0), rtol=0, atol=rounding)
    spread = np.max(np.abs(taken - taken.mean(0)))
    np.testing.assert_allclose(swag.diagonal_variance, taken.var(0), rtol=0,
                               atol=4 * spread * rounding + 4 * rounding ** 2)
    # The check can tell one epoch from the next: the iterates still move by far more.
    shifted = collected(iterates[:-1], **schedule)
    assert np.max(np.abs(shifted.mean(0) - taken.mean(0))) > 10 * rounding
    assert np.max(np.abs(shifted.var(0) - taken.var(0))) > 10 * (4 * spread * rounding)
    # The Keras run ends where the closed form does (near the least-squares solution).
    np.testing.assert_allclose(flat(model.trainable_weights), iterates[-1], rtol=0, atol=rounding)
    deviations = [taken[i] - taken[:i + 1].mean(0) for i in range(len(taken))]
    np.testing.assert_allclose(swag.deviations, deviations[-3:], rtol=0, atol=2 * rounding)


@pytest.mark.jax
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_moments_are_numpy_mean_and_variance_of_the_snapshots(regression, name):
    model, snapshots, swags = regression
    swag = swags[name]
    taken = collected(snapshots, **SCHEDULES[name])
    n = len(taken)
    assert swag.num_collected == n == {"full": 7, "wide": 16, "diag": 5}[name]
    # n running float64 updates, each within a few eps of its terms.
    atol_mean = 4 * n * EPS64 * np.max(np.abs(taken))
    np.testing.assert_allclose(swag.mean, taken.mean(0), rtol=0, atol=atol_mean)
    atol_variance = 8 * n * EPS64 * np.max(taken ** 2)
    variance = taken.var(0)
    np.testing.assert_allclose(swag.diagonal_variance, variance, rtol=0, atol=atol_variance)
    assert np.max(variance) > 1e6 * atol_variance  # the weights moved: the check has teeth
    assert swag.mean.shape == (24 + 8 + 16 + 2,) and swag.mean.dtype == np.float64


@pytest.mark.jax
@pytest.mark.parametrize("name", ["full", "wide"])
def test_the_ring_keeps_the_last_k_deviations_oldest_first(regression, name):
    _, snapshots, swags = regression
    swag = swags[name]
    taken = collected(snapshots, **SCHEDULES[name])
    # theta_i - theta_bar_i, theta_bar_i the mean of the first i snapshots (Algorithm 1).
    deviations = np.stack([taken[i] - taken[:i + 1].mean(0) for i in range(len(taken))])
    kept = deviations[-SCHEDULES[name]["max_rank"]:]
    assert swag.deviations.shape == (min(len(taken), swag.max_rank), taken.shape[1])
    np.testing.assert_allclose(swag.deviations, kept, rtol=0,
                               atol=8 * len(taken) * EPS64 * np.max(np.abs(taken)))
    assert swags["diag"].deviations.shape == (0, taken.shape[1])


def posterior_covariance(swag):
    """0.5 (Sigma_diag + D D^T / (K - 1)) for SWAG, Sigma_diag for SWAG-Diag."""
    if swag.diagonal_only:
        return np.diag(swag.diagonal_variance)
    d = swag.deviations.T
    return 0.5 * (np.diag(swag.diagonal_variance) + d @ d.T / (d.shape[1] - 1))


@pytest.mark.jax
@pytest.mark.parametrize("name", ["full", "diag"])
def test_draws_have_the_posterior_mean_and_covariance(regression, name):
    swag = regression[2][name]
    count = 20_000
    draws = swag.sample_vectors(count, seed=1)
    mean, covariance = swag.mean, posterior_covariance(swag)
    assert draws.shape == (count, mean.size)
    # Per coordinate, within 4 standard errors of theta_bar (plus the float64 rounding of
    # the draws' sum, for a coordinate that never moved).
    standard_error = np.sqrt(np.diag(covariance) / count)
    assert np.all(np.abs(draws.mean(0) - mean)
                  <= 4 * standard_error + count * EPS64 * np.abs(mean))
    # Around the known mean, each entry of the empirical covariance of Gaussian draws has
    # variance (C_ij^2 + C_ii C_jj) / count: 5 standard errors.
    centred = draws - mean
    empirical = centred.T @ centred / count
    tolerance = 5 * np.sqrt((covariance ** 2 + np.outer(np.diag(covariance),
                                                        np.diag(covariance))) / count)
    # (+ the float64 rounding of draw - theta_bar, <= eps64 |theta_bar| per coordinate,
    # times |draw - theta_bar| <= 6 standard deviations, twice.)
    rounding = 12 * EPS64 * np.abs(mean).max() * np.sqrt(np.diag(covariance)).max()
    assert np.all(np.abs(empirical - covariance) <= tolerance + rounding)
    # A scale off by 2 (no 1/2, or 1/2 on SWAG-Diag) or K for K - 1 would not pass.
    for wrong in (2 * covariance, 0.5 * covariance):
        assert np.any(np.abs(empirical - wrong) > tolerance)
    if not swag.diagonal_only:
        d = swag.deviations.T
        wrong = 0.5 * (np.diag(swag.diagonal_variance) + d @ d.T / d.shape[1])
        assert np.any(np.abs(empirical - wrong) > tolerance)


@pytest.mark.jax
def test_sample_weights_are_one_draw_shaped_as_the_model(regression):
    model, _, swags = regression
    swag = swags["full"]
    weights = swag.sample_weights(seed=7)
    assert [w.shape for w in weights] == [tuple(v.shape) for v in model.trainable_weights]
    assert all(w.dtype == np.float32 for w in weights)
    vector = swag.sample_vectors(1, seed=7)[0]
    np.testing.assert_array_equal(np.concatenate([w.ravel() for w in weights]),
                                  vector.astype(np.float32))
    assert all(np.array_equal(a, b) for a, b in zip(weights, swag.sample_weights(seed=7)))
    assert not np.array_equal(weights[0], swag.sample_weights(seed=8)[0])
    np.testing.assert_array_equal(np.concatenate([w.ravel() for w in swag.swa_weights()]),
                                  swag.mean.astype(np.float32))


@pytest.mark.jax
def test_predictive_members_hold_the_draws_and_leave_the_model_alone(regression):
    model, snapshots, swags = regression
    swag = swags["full"]
    predictive = swag.predictive_model(4, seed=3)
    members = tfp_bnn.ensembles.members_of(predictive)
    draws = swag.sample_vectors(4, seed=3)
    for member, draw in zip(members, draws):
        assert member is not model
        np.testing.assert_array_equal(flat(member.trainable_weights), draw.astype(np.float32))
    # The trained model still holds its last weights.
    np.testing.assert_array_equal(flat(model.trainable_weights), snapshots[-1].astype(np.float32))


@pytest.mark.jax
def test_members_and_swa_keep_the_model_non_trainable_weights():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, trainable=False),
                              keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
    swag = SWAG(start_epoch=0)
    model.fit(X, Y, batch_size=16, epochs=3, verbose=0, callbacks=[swag])
    assert swag.mean.shape == (5,)  # the frozen layer's 16 weights are not SWAG's
    frozen = flat(model.non_trainable_weights)
    for member in tfp_bnn.ensembles.members_of(swag.predictive_model(2, seed=0)):
        np.testing.assert_array_equal(flat(member.non_trainable_weights), frozen)
    assert swag.set_swa_weights() is model
    np.testing.assert_array_equal(flat(model.trainable_weights), swag.mean.astype(np.float32))
    np.testing.assert_array_equal(flat(model.non_trainable_weights), frozen)
    with pytest.raises(ValueError, match="`batch_norm_data` is only for a model with "
                                         "BatchNormalization"):
        swag.set_swa_weights(batch_norm_data=X)


def forward_rounding(vector, units, x=X):
    """Bound on |Keras' float32 outputs of `mlp` - `mlp_outputs`| for one weight vector.

    The weights are rounded to float32 (eps32 / 2 each) and a sum of n products is within
    (n + 1) eps32 of the sum of their magnitudes: 3 + 1 terms, then 8 + 1.
    """
    cuts = np.cumsum([24, 8, 8 * units])
    w1, b1, w2, b2 = (np.abs(part) for part in np.split(vector, cuts))
    first = np.abs(x.astype(np.float64)) @ w1.reshape(3, 8) + b1  # >= |hidden|
    second = first @ w2.reshape(8, units) + b2
    return np.max(10 * EPS32 * second + (5 * EPS32 * first) @ w2.reshape(8, units))


@pytest.mark.jax
def test_regression_predictive_is_the_mixture_of_the_draws(regression):
    swag = regression[2]["full"]
    members = 4
    predictive = swag.predictive_model(members, seed=3)
    outputs = np.stack([mlp_outputs(draw, 2) for draw in swag.sample_vectors(members, 3)])
    means, variances = outputs[..., 0], np.exp(outputs[..., 1])
    atol = max(forward_rounding(draw, 2) for draw in swag.sample_vectors(members, 3))
    pred = tfp_bnn.predict.regression(predictive, X, num_samples=members)
    np.testing.assert_allclose(pred.mean[:, 0], means.mean(0), rtol=0, atol=atol)
    spread = np.max(np.abs(means - means.mean(0)))
    np.testing.assert_allclose(pred.epistemic_variance[:, 0], means.var(0), rtol=0,
                               atol=2 * spread * atol + atol ** 2)
    assert means.var(0).max() > 100 * (2 * spread * atol)
    np.testing.assert_allclose(pred.aleatoric_variance[:, 0], variances.mean(0),
                               rtol=atol + 2 * EPS32, atol=0)


@pytest.mark.jax
def test_classification_predictive_is_the_mixture_of_the_draws():
    model = mlp(3, seed=5)
    model.compile(keras.optimizers.SGD(0.1),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    swag = SWAG(start_epoch=1, max_rank=4)
    model.fit(X, LABELS, batch_size=16, epochs=6, verbose=0, callbacks=[swag])
    predictive = swag.predictive_model(3, seed=1)
    logits = np.stack([mlp_outputs(draw, 3) for draw in swag.sample_vectors(3, 1)])
    atol = max(forward_rounding(draw, 3) for draw in swag.sample_vectors(3, 1))
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    pred = tfp_bnn.predict.classification(predictive, X, num_samples=6)
    # softmax moves by at most twice the logits' largest change (plus its own rounding).
    np.testing.assert_allclose(pred.probs, probs.mean(0), rtol=0, atol=2 * atol + 4 * EPS32)
    assert np.max(np.abs(probs - probs.mean(0))) > 1e-3  # the draws differ


def test_predictive_saves_loads_and_exports(regression, tmp_path):
    import tensorflow as tf  # noqa: PLC0415 - the exported endpoint takes a tf int

    swag = regression[2]["full"]
    predictive = swag.predictive_model(4, seed=3)
    path = str(tmp_path / "swag.keras")
    predictive.save(path)
    loaded = tfp_bnn.load_model(path)
    # Still one stacked matmul per layer after loading, so the very same float32 numbers.
    assert loaded.get_layer("members").vectorized
    np.testing.assert_array_equal(loaded(X), predictive(X))
    pred = tfp_bnn.predict.regression(predictive, X, num_samples=4)
    tfp_bnn.export.export_predictive(loaded, str(tmp_path / "served"), samples_per_call=4)
    loaded_predictive = tfp_bnn.load_predictive(str(tmp_path / "served"))  # kept alive
    served = loaded_predictive.serve(X, tf.constant(8))
    # The same member outputs, summed over 8 samples in float32 there, float64 here.
    scale = np.max(np.abs(pred.mean))
    np.testing.assert_allclose(served["mean"], pred.mean, rtol=0, atol=10 * EPS32 * scale)
    np.testing.assert_allclose(served["epistemic_variance"], pred.epistemic_variance, rtol=0,
                               atol=20 * EPS32 * scale ** 2)


def _batch_norm_model(seed):
    """3 -> Dense(4) -> BatchNormalization -> relu -> Dense(1)."""
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, kernel_initializer=keras.initializers.GlorotUniform(seed))(
        inputs)
    hidden = keras.layers.BatchNormalization(momentum=0.9)(hidden)
    outputs = keras.layers.Dense(1, kernel_initializer=keras.initializers.GlorotUniform(
        seed + 1))(keras.layers.ReLU()(hidden))
    return keras.Model(inputs, outputs)


def _expected_statistics(vector):
    """Mean and population variance over X of Dense(4)'s outputs for the weight vector."""
    hidden = X.astype(np.float64) @ vector[:12].reshape(3, 4) + vector[12:16]
    return hidden.mean(0), hidden.var(0), hidden


@pytest.mark.jax
def test_batch_norm_statistics_are_recomputed_for_every_draw():
    model = _batch_norm_model(seed=2)
    model.compile(keras.optimizers.SGD(0.05), "mse")
    swag = SWAG(start_epoch=1)
    model.fit(X, Y, batch_size=16, epochs=4, verbose=0, callbacks=[swag])
    with pytest.raises(ValueError, match="BatchNormalization layers.*pass `batch_norm_data=`"):
        swag.predictive_model(2)
    with pytest.raises(ValueError, match="BatchNormalization layers.*pass `batch_norm_data=`"):
        swag.set_swa_weights()
    with pytest.raises(ValueError, match="`batch_norm_data` must hold training inputs"):
        swag.predictive_model(2, batch_norm_data=X[:0])
    trained = keras.ops.convert_to_numpy(model.layers[2].moving_mean)
    # Batches of 24, 24 and 16 rows: the combined moments are those of all 64.
    predictive = swag.predictive_model(3, seed=4, batch_norm_data=X, batch_size=24)
    draws = swag.sample_vectors(3, seed=4)
    for member, draw in zip(tfp_bnn.ensembles.members_of(predictive), draws):
        layer = next(l for l in member.layers if isinstance(l, keras.layers.BatchNormalization))
        assert layer.momentum == 0.9
        mean, variance, hidden = _expected_statistics(draw)
        # Keras' float32 moments: <= N eps32 of the terms' magnitudes per sum.
        atol = 4 * N * EPS32 * np.max(np.abs(hidden))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.moving_mean), mean,
                                   rtol=0, atol=atol)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.moving_variance), variance,
                                   rtol=0, atol=4 * atol * np.max(np.abs(hidden)))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(model.layers[2].moving_mean),
                                  trained)  # the members' passes left the model alone
    swag.set_swa_weights(batch_norm_data=X)
    layer = model.layers[2]
    mean, variance, hidden = _expected_statistics(swag.mean)
    atol = 4 * N * EPS32 * np.max(np.abs(hidden))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.moving_mean), mean, rtol=0,
                               atol=atol)
    assert np.max(np.abs(mean - trained)) > 100 * atol  # the old statistics were stale


@pytest.mark.jax
@pytest.mark.parametrize("kwargs, message", [
    (dict(start_epoch=-1), "`start_epoch` must be a non-negative int, got -1"),
    (dict(start_epoch=1.5), "`start_epoch` must be a non-negative int, got 1.5"),
    (dict(start_epoch=0, collect_every=0), "`collect_every` must be a positive int, got 0"),
    (dict(start_epoch=0, max_rank=1), "`max_rank` must be an int >= 2, got 1"),
    (dict(start_epoch=0, diagonal_only=1), "`diagonal_only` must be True or False, got 1"),
])
def test_bad_arguments_name_themselves(kwargs, message):
    with pytest.raises(ValueError, match=message):
        SWAG(**kwargs)


@pytest.mark.jax
def test_nothing_to_sample_before_two_snapshots_and_bad_draw_arguments(regression):
    swag = SWAG(start_epoch=3)
    for use in (lambda: swag.sample_weights(0), lambda: swag.mean, swag.swa_weights,
                lambda: swag.predictive_model(2)):
        with pytest.raises(ValueError, match="collected no weights yet.*start_epoch=3"):
            use()
    model = mlp(2, seed=0)
    model.compile(keras.optimizers.SGD(0.05), GaussianNLL())
    model.fit(X, Y, batch_size=32, epochs=4, verbose=0, callbacks=[swag])
    assert swag.num_collected == 1
    assert len(swag.swa_weights()) == 4
    with pytest.raises(ValueError, match="collected 1 snapshot; it needs at least 2 to sample"):
        swag.sample_vectors(5)
    other = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    other.compile("sgd", "mse")
    with pytest.raises(ValueError, match="snapshots of 50 weights, but the model now has 4.*"
                                         r"reset\(\)"):
        other.fit(X, Y, epochs=4, verbose=0, callbacks=[swag])
    swag.reset()
    assert swag.num_collected == 0
    trained = regression[2]["full"]
    with pytest.raises(ValueError, match="`num_samples` must be a positive int, got 0"):
        trained.sample_vectors(0)
    with pytest.raises(ValueError, match="`seed` must be a non-negative int, got -1"):
        trained.sample_weights(-1)
    with pytest.raises(ValueError, match="`num_members` must be a positive int, got 0"):
        trained.predictive_model(0)


@pytest.mark.jax
def test_registered_and_config_round_trips():
    assert keras.saving.get_registered_name(SWAG) == "tfp_bnn>SWAG"
    swag = SWAG(start_epoch=4, collect_every=2, max_rank=5, diagonal_only=True)
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(swag))
    assert clone.get_config() == swag.get_config() == {
        "start_epoch": 4, "collect_every": 2, "max_rank": 5, "diagonal_only": True}


@pytest.mark.jax
def test_sizes_too_large_for_memory_are_refused_before_the_work():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1000)])
    model.compile("sgd", "mse")
    x, y = np.zeros((4, 4), "float32"), np.zeros((4, 1000), "float32")
    huge = SWAG(start_epoch=0, max_rank=10**9)
    with pytest.raises(ValueError, match=r"SWAG's moments and 1000000000 deviations of "
                                         r"5,000 weights would need"):
        model.fit(x, y, epochs=1, verbose=0, callbacks=[huge])
    swag = SWAG(start_epoch=0)
    model.fit(x, y, epochs=2, verbose=0, callbacks=[swag])
    with pytest.raises(ValueError, match=r"predictive model of 1,000,000,000 members would "
                                         r"need"):
        swag.predictive_model(10**9)
