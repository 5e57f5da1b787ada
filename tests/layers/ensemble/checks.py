"""What the tests of tests/layers/ensemble check on every cheap-ensemble model.

A model here is a classifier whose plain call gives member logits [B, M, K]: it trains with
`tfp_bnn.ensembles.MemberLoss`, `tfp_bnn.predict` gives the exact mixture of the members,
other sample counts are refused, and the `.keras` file and the exported predictive give the
same numbers (`TrainedClassifierChecks`, the tests every layer test file runs on its model).
Plus the checks the layers share (argument errors, mixed precision, the members they
declare) and NumPy references (softmax, a direct 2-D convolution) the layer tests compare
with.
"""

import keras
import numpy as np
import pytest
from keras import ops

import tfp_bnn
from tfp_bnn.layers._tracing import sample_trace
from tfp_bnn.predict.engine import sample_multiple

RNG = np.random.default_rng(0)


def softmax(logits):
    logits = np.asarray(logits, np.float64)
    e = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def classification_data(shape, classes=3, count=48, seed=0):
    """Inputs of `shape` per example and labels that depend on them (learnable)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(count,) + tuple(shape)).astype("float32")
    score = x.reshape(count, -1)
    y = (np.digitize(score[:, 0] + score[:, -1], [-0.5, 0.5]) % classes).astype("int32")
    return x, y


@keras.saving.register_keras_serializable(package="tfp_bnn_tests")
def member_loss():
    """The ensemble's training loss: `tfp_bnn.ensembles.MemberLoss` (keras.ops, both
    backends)."""
    return tfp_bnn.ensembles.MemberLoss(
        keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def member_losses(model, x, y):
    """Each member's mean cross-entropy, from the plain call's [B, M, K] logits."""
    probs = softmax(ops.convert_to_numpy(model(x)))
    picked = np.take_along_axis(probs, y[:, None, None].astype(int), axis=-1)[..., 0]
    return -np.log(picked).mean(axis=0)


def train(model, x, y, epochs=8):
    """Compiles with the member loss and fits; returns (losses before, after) per member."""
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=member_loss())
    before = member_losses(model, x, y)
    history = model.fit(x, y, batch_size=16, epochs=epochs, shuffle=False, verbose=0)
    after = member_losses(model, x, y)
    losses = history.history["loss"]
    assert losses[-1] < losses[0], losses
    np.testing.assert_allclose(model.evaluate(x, y, verbose=0), member_losses(model, x, y).sum(),
                               rtol=1e-4)
    return before, after


def assert_trained(before, after):
    """Every member's loss went down, and the members differ."""
    assert np.all(after < before), (before, after)
    assert len(set(np.round(after, 6))) == len(after), after


def assert_predictive_is_the_mixture(model, x, num_members, tolerance=1e-5):
    """`tfp_bnn.predict` (M and 2M samples) gives the mean of the members' softmax, computed
    from the plain call's [B, M, K] logits; sample s is member s mod M. `tolerance`: the
    relative rounding of the compute dtype (float32 by default)."""
    logits = ops.convert_to_numpy(model(x)).astype(np.float64)
    assert logits.shape[1] == num_members
    mixture = softmax(logits).mean(axis=1)
    for num_samples in (num_members, 2 * num_members):
        prediction = tfp_bnn.predict.classification(model, x, num_samples=num_samples)
        np.testing.assert_allclose(prediction.probs, mixture, rtol=tolerance,
                                   atol=tolerance / 10)
    samples = tfp_bnn.predict.sample(model, x, num_samples=2 * num_members)
    for s in range(2 * num_members):
        np.testing.assert_allclose(samples[s], logits[:, s % num_members], rtol=tolerance,
                                   atol=tolerance)


def assert_refuses_other_sample_counts(model, x, num_members):
    with pytest.raises(ValueError, match=f"`num_samples` must be a multiple of {num_members}"):
        tfp_bnn.predict.classification(model, x, num_samples=num_members + 1)
    # A direct trace of another size (bypassing tfp_bnn.predict) is refused by the layers.
    tiled = np.concatenate([x] * (num_members + 1))
    with sample_trace(num_members + 1), pytest.raises(
            ValueError, match=f"must be a multiple of {num_members}, got a call of "
                              f"{num_members + 1} samples"):
        model(tiled)


def assert_saved_model_loads(model, x, path):
    model.save(path)
    loaded = tfp_bnn.load_model(path)
    np.testing.assert_array_equal(ops.convert_to_numpy(loaded(x)),
                                  ops.convert_to_numpy(model(x)))
    return loaded


def assert_export_serves_the_mixture(model, x, num_members, path):
    import tensorflow as tf  # noqa: PLC0415 - export is TensorFlow-only

    expected = tfp_bnn.predict.classification(model, x, num_samples=num_members)
    tfp_bnn.export.export_predictive(model, str(path), task="classification",
                                     samples_per_call=num_members)
    served = tfp_bnn.load_predictive(str(path))
    out = served.serve(x, tf.constant(num_members))
    np.testing.assert_allclose(out["probabilities"], expected.probs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out["mutual_information"], expected.mutual_information,
                               rtol=1e-4, atol=1e-6)


def assert_trains_under_mixed_float16(model, x, y, num_members):
    """Under the mixed_float16 policy (set by the caller) `model` computes in float16 with
    float32 weights, a few epochs lower its member loss, and `tfp_bnn.predict` still gives
    the mixture of its members (to float16's rounding)."""
    assert model(x).dtype == "float16"
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss=member_loss())
    losses = model.fit(x, y, batch_size=16, epochs=3, verbose=0).history["loss"]
    assert np.all(np.isfinite(losses)) and losses[-1] < losses[0]
    assert all(w.dtype == "float32" for w in model.weights)
    assert_predictive_is_the_mixture(model, x[:10], num_members, tolerance=1e-3)


class TrainedClassifierChecks:
    """The tests of a cheap-ensemble classifier trained once with the member loss.

    A layer test file subclasses it as a `Test...` class (pytest collects the tests there,
    once per file) and sets `build` (`staticmethod` of a function returning the uncompiled
    model, its plain call [B, M, classes]), `num_members`, `data` (x, y as
    `classification_data` makes them), `seed` and `epochs`; `check_loaded` is what the file
    checks more on the model its `.keras` file loads.
    """

    build = None
    num_members = None
    data = None
    seed = None
    epochs = 8
    classes = 3

    @pytest.fixture(scope="class")
    def trained(self):
        """(model, member losses before, after) of the model trained once for the class."""
        keras.utils.set_random_seed(self.seed)
        model = self.build()
        before, after = train(model, *self.data, epochs=self.epochs)
        return model, before, after

    def check_loaded(self, loaded):
        """More checks on the model loaded from the `.keras` file (none by default)."""

    @pytest.mark.jax
    def test_trains_every_member_with_member_loss(self, trained):
        model, before, after = trained
        x = self.data[0]
        assert model(x).shape == (len(x), self.num_members, self.classes)
        assert_trained(before, after)

    @pytest.mark.jax
    def test_predicts_the_exact_mixture_of_its_members(self, trained):
        assert_predictive_is_the_mixture(trained[0], self.data[0][:10], self.num_members)

    @pytest.mark.jax
    def test_refuses_sample_counts_off_its_members(self, trained):
        assert_refuses_other_sample_counts(trained[0], self.data[0][:10], self.num_members)

    @pytest.mark.jax
    def test_keras_file_gives_the_same_outputs(self, trained, tmp_path):
        loaded = assert_saved_model_loads(trained[0], self.data[0], str(tmp_path / "model.keras"))
        self.check_loaded(loaded)

    def test_exported_predictive_serves_the_mixture(self, trained, tmp_path):
        assert_export_serves_the_mixture(trained[0], self.data[0][:10], self.num_members,
                                         tmp_path / "served")


def assert_bad_arguments_name_themselves(cls, good, cases):
    """`cls(**good)` with each case's bad arguments put in raises a one-line ValueError
    that matches the case's message."""
    for bad, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            cls(**{**good, **bad})
        assert "\n" not in str(error.value)


def assert_mixed_precision_matches_float32(half, full, x):
    """`half` (dtype policy mixed_float16) computes in float16 with float32 weights and
    gives what `full` (the same layer in float32) gives with its weights, to float16's
    rounding."""
    out = half(x)
    full(x)
    full.set_weights(half.get_weights())
    assert ops.convert_to_numpy(out).dtype == np.float16
    assert all(w.dtype == "float32" for w in half.weights)
    np.testing.assert_allclose(ops.convert_to_numpy(out), ops.convert_to_numpy(full(x)),
                               rtol=2e-2, atol=2e-2)


def assert_declares_its_members(cls, num_members, input_shape):
    """`cls(num_members)` (a layer whose one argument is M) makes `tfp_bnn.predict` keep a
    model's sample counts a multiple of M, round trips its config, and refuses an M < 1
    naming `num_members`."""
    layer = cls(num_members, name="members")
    assert sample_multiple(keras.Sequential([keras.Input(input_shape), layer])) == num_members
    again = cls.from_config(layer.get_config())
    assert (again.num_members, again.name) == (num_members, "members")
    for bad in (0, -1):
        with pytest.raises(ValueError, match=f"`num_members` must be a positive int, got {bad}"):
            cls(bad)


def conv2d_reference(x, kernel, strides=(1, 1), padding="valid"):
    """A direct channels_last 2-D convolution in NumPy (float64), no dilation.

    x [N, H, W, C], kernel [kh, kw, C, F]; "same" pads as TensorFlow does (the extra row or
    column at the end).
    """
    x = np.asarray(x, np.float64)
    kernel = np.asarray(kernel, np.float64)
    kh, kw = kernel.shape[:2]
    sh, sw = strides
    if padding == "same":
        out_h, out_w = -(-x.shape[1] // sh), -(-x.shape[2] // sw)
        pad_h = max((out_h - 1) * sh + kh - x.shape[1], 0)
        pad_w = max((out_w - 1) * sw + kw - x.shape[2], 0)
        x = np.pad(x, [(0, 0), (pad_h // 2, pad_h - pad_h // 2),
                       (pad_w // 2, pad_w - pad_w // 2), (0, 0)])
    out_h = (x.shape[1] - kh) // sh + 1
    out_w = (x.shape[2] - kw) // sw + 1
    out = np.zeros((x.shape[0], out_h, out_w, kernel.shape[-1]))
    for i in range(out_h):
        for j in range(out_w):
            window = x[:, i * sh:i * sh + kh, j * sw:j * sw + kw, :]
            out[:, i, j, :] = np.einsum("nabc,abcf->nf", window, kernel)
    return out
