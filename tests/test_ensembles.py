"""tfp_bnn.ensembles: one fit trains every member on its own loss; the predictive is the mixture.

Every test but the TensorFlow SavedModel export runs on both backends (`pytest.mark.jax`)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

import tfp_bnn
from tfp_bnn import ensembles
from tfp_bnn.losses import GaussianNLL
from tfp_bnn.layers._tracing import sample_trace
from tfp_bnn.losses import gaussian_nll

M = 3
to_numpy = keras.ops.convert_to_numpy
RNG = np.random.default_rng(0)
X = RNG.normal(size=(48, 3)).astype("float32")
Y = (X.sum(axis=1, keepdims=True) + 0.1 * RNG.normal(size=(48, 1))).astype("float32")


def plain_member(seed, dropout=None, flipout=False):
    """A 3-8-2 MLP [mean, log variance]: Dense layers, or with MCDropout / a Flipout head."""
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(8, activation="relu",
                                kernel_initializer=keras.initializers.GlorotUniform(seed))(inputs)
    if dropout:
        hidden = tfp_bnn.layers.MCDropout(dropout, seed=seed)(hidden)
    if flipout:
        head = tfp_bnn.layers.DenseFlipout(2, kl_weight=1e-3, seed=seed)
    else:
        head = keras.layers.Dense(2, kernel_initializer=keras.initializers.GlorotUniform(seed + 50))
    return keras.Model(inputs, head(hidden))


def compiled(members, vectorize=True):
    model = ensembles.deep_ensemble(members, vectorize=vectorize)
    model.compile(optimizer=keras.optimizers.Adam(1e-2),
                  loss=ensembles.MemberLoss(GaussianNLL()))
    return model


def member_losses(members):
    return np.array([float(np.mean(gaussian_nll(Y, m(X)))) for m in members])


@pytest.fixture(scope="module")
def trained():
    members = [plain_member(seed) for seed in range(M)]
    model = compiled(members)
    before = member_losses(members)
    history = model.fit(X, Y, batch_size=16, epochs=5, verbose=0)
    return model, members, before, history


@pytest.mark.jax
def test_one_fit_trains_every_member_on_its_own_loss(trained):
    model, members, before, history = trained
    assert model.get_layer("members").vectorized
    after = member_losses(members)
    assert np.all(after < before), (before, after)
    # Keras' usual values: the reported loss is the sum of the member losses.
    assert len(history.history["loss"]) == 5
    np.testing.assert_allclose(model.evaluate(X, Y, verbose=0), after.sum(), rtol=1e-5)
    outputs = [to_numpy(m(X)) for m in members]
    for i in range(M):
        for j in range(i):
            assert np.abs(outputs[i] - outputs[j]).max() > 1e-2


@pytest.mark.jax
def test_one_step_is_each_member_own_step():
    # The sum of member losses gives member m exactly its own gradient, so one ensemble step
    # of plain SGD equals M separate steps (an average over members would take 1/M of each
    # step; a loss on the averaged output would couple the members).
    # Two members, each trained alone from the same start; then both ensemble layouts.
    alone = [plain_member(seed) for seed in range(2)]
    start = [m.get_weights() for m in alone]
    for member in alone:
        member.compile(optimizer=keras.optimizers.SGD(0.1), loss=GaussianNLL())
        member.train_on_batch(X, Y)
    for vectorize in (True, False):
        members = [plain_member(seed) for seed in range(2)]
        for member, weights in zip(members, start):
            member.set_weights(weights)
        model = ensembles.deep_ensemble(members, vectorize=vectorize)
        model.compile(optimizer=keras.optimizers.SGD(0.1),
                      loss=ensembles.MemberLoss(GaussianNLL()))
        assert model.get_layer("members").vectorized == vectorize
        model.train_on_batch(X, Y)
        for member, reference in zip(members, alone):
            for ours, theirs in zip(member.get_weights(), reference.get_weights()):
                np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.jax
def test_stacked_and_one_by_one_give_the_members_outputs(trained):
    model, members, _, _ = trained
    by_hand = np.stack([to_numpy(m(X)) for m in members], axis=1)
    assert model(X).shape == (len(X), M, 2)
    np.testing.assert_allclose(model(X), by_hand, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ensembles.deep_ensemble(members, vectorize=False)(X), by_hand,
                               rtol=1e-6, atol=1e-6)


@pytest.mark.jax
@pytest.mark.parametrize("num_samples", [M, 2 * M])
def test_predictive_is_the_mixture_of_the_members(trained, num_samples):
    model, members, _, _ = trained
    outputs = np.stack([to_numpy(m(X)).astype(np.float64) for m in members])
    means, variances = outputs[..., 0], np.exp(outputs[..., 1])
    pred = tfp_bnn.predict.regression(model, X, num_samples=num_samples)
    # Deterministic members: exact up to float32 rounding.
    np.testing.assert_allclose(pred.mean[:, 0], means.mean(0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(pred.epistemic_variance[:, 0], means.var(0), rtol=1e-4,
                               atol=1e-6)
    np.testing.assert_allclose(pred.aleatoric_variance[:, 0], variances.mean(0), rtol=1e-5)


@pytest.mark.jax
def test_sample_chunks_stay_whole_rounds_of_the_members(trained):
    model, members, _, _ = trained
    # max_rows 100 over 48 inputs would allow 2 samples per call: rounded up to M, so the
    # 5 * M samples come in 5 calls of one round each and still give the exact mixture.
    pred = tfp_bnn.predict.regression(model, X, num_samples=5 * M, max_rows=100)
    means = np.stack([to_numpy(m(X))[:, 0] for m in members])
    np.testing.assert_allclose(pred.mean[:, 0], means.mean(0), rtol=1e-5, atol=1e-6)
    draws = tfp_bnn.predict.sample(model, X, num_samples=4 * M, samples_per_call=2 * M)
    np.testing.assert_array_equal(draws[:M], draws[M:2 * M])


@pytest.mark.jax
def test_sample_counts_off_the_members_fail_before_tracing(trained):
    model = trained[0]
    for kwargs, name in (({"num_samples": 4}, "num_samples"),
                         ({"num_samples": 6, "samples_per_call": 4}, "samples_per_call")):
        with pytest.raises(ValueError, match=f"`{name}` must be a multiple of {M} for this "
                                             "model") as error:
            tfp_bnn.predict.sample(model, X, **kwargs)
        assert "\n" not in str(error.value)
    # A direct trace of another size (bypassing tfp_bnn.predict) is refused by the layer.
    with sample_trace(4), pytest.raises(ValueError, match=f"multiple of {M}, got a call of 4"):
        model(np.tile(X, (4, 1)))


@pytest.mark.jax
def test_sample_s_comes_from_member_s_mod_m():
    # Bayesian members (MC dropout, Flipout head): in mean mode tile s is member s mod M's
    # deterministic output; sampling, the two tiles of one member are two draws.
    members = [plain_member(0, dropout=0.5), plain_member(1, dropout=0.5, flipout=True)]
    model = ensembles.deep_ensemble(members)
    assert not model.get_layer("members").vectorized
    with tfp_bnn.mean_mode(model):
        draws = tfp_bnn.predict.sample(model, X, num_samples=4)
        expected = [to_numpy(m(X, training=False)) for m in members]
    for s in range(4):
        np.testing.assert_allclose(draws[s], expected[s % 2], rtol=1e-5, atol=1e-6)
    draws = tfp_bnn.predict.sample(model, X, num_samples=4)
    for m in range(2):
        assert np.abs(draws[m] - draws[m + 2]).max() > 1e-3


def test_keras_file_and_exported_predictive_serve_the_same_numbers(trained, tmp_path):
    model = trained[0]
    path = str(tmp_path / "ensemble.keras")
    model.save(path)
    loaded = tfp_bnn.load_model(path)
    assert loaded.get_layer("members").vectorized
    np.testing.assert_array_equal(loaded(X), model(X))
    np.testing.assert_allclose(loaded.evaluate(X, Y, verbose=0), model.evaluate(X, Y, verbose=0),
                               rtol=1e-6)
    pred = tfp_bnn.predict.regression(model, X, num_samples=M)
    with pytest.raises(ValueError, match=f"`samples_per_call` must be a multiple of {M}"):
        tfp_bnn.export.export_predictive(loaded, str(tmp_path / "odd"), samples_per_call=M + 1)
    assert not (tmp_path / "odd").exists()
    tfp_bnn.export.export_predictive(loaded, str(tmp_path / "served"), samples_per_call=M)
    loaded_predictive = tfp_bnn.load_predictive(str(tmp_path / "served"))  # kept alive
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"multiple of {M}"):
        loaded_predictive.serve(X, tf.constant(M + 1))
    served = loaded_predictive.serve(X, tf.constant(M))
    np.testing.assert_allclose(served["mean"], pred.mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(served["epistemic_variance"], pred.epistemic_variance,
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(served["aleatoric_variance"], pred.aleatoric_variance,
                               rtol=1e-5)


@pytest.mark.jax
def test_members_of_returns_the_members(trained):
    model, members, _, _ = trained
    assert ensembles.members_of(model) == members
    with pytest.raises(ValueError, match="is not a deep ensemble"):
        ensembles.members_of(members[0])


@pytest.mark.jax
def test_bad_arguments_fail_in_one_line():
    member = plain_member(0)
    other = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    wide = keras.Sequential([keras.Input((3,)), keras.layers.Dense(3)])
    cases = [
        ([], r"`len\(members\)` must be a positive int, got 0"),
        (member, "must be a list of Keras models, got Functional"),
        ([member, "model"], r"`members\[1\]` must be a Keras model, got str"),
        ([member, other], r"`members\[1\]` inputs have shape \(4,\), but members\[0\]'s"),
        ([member, wide], r"`members\[1\]` outputs have shape \(3,\)"),
        ([member, member], "the same model more than once"),
    ]
    for members, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            ensembles.deep_ensemble(members)
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="`vectorize` must be"):
        ensembles.EnsembleMembers([member], vectorize="yes")
    with pytest.raises(ValueError, match="`loss` must be a Keras loss"):
        ensembles.MemberLoss(lambda y, p: y)
    with pytest.raises(ValueError, match="MemberLoss needs ensemble outputs"):
        ensembles.MemberLoss(GaussianNLL())(Y, np.zeros([48], "float32"))
