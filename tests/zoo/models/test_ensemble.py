"""Tests of zoo.models.ensemble: the paper's defaults, any registry member, sizes and errors."""

import keras
import numpy as np
import pytest

import tfp_bnn
import zoo
from tfp_bnn import ensembles
from zoo.models import limits

RNG = np.random.default_rng(1)
X = RNG.normal(size=(32, 4)).astype("float32")
Y = X[:, :1].astype("float32")


def build(input_shape=(4,), **overrides):
    return zoo.build_model("deep_ensemble", input_shape, **{"num_train": 32, **overrides})


def test_defaults_are_the_papers_uci_setup():
    model = build()
    members = ensembles.members_of(model)
    assert len(members) == 5 and model.get_layer("members").vectorized
    # Plain d-50-2 MLPs [mean, s(x)], no Bayesian layer: 5 * ((4 + 1) * 50 + 51 * 2) weights.
    assert model.count_params() == 5 * (5 * 50 + 51 * 2)
    assert not tfp_bnn.bayesian_layers(model)
    assert isinstance(model.optimizer, keras.optimizers.Adam)
    assert isinstance(model.loss, ensembles.MemberLoss)
    assert model.output.shape == (None, 5, 2)
    # Member m has seed 5 * seed + m: the members start from different weights.
    first, second = (m.get_weights()[0] for m in members[:2])
    assert np.abs(first - second).max() > 1e-3
    again = ensembles.members_of(build(seed=1))
    assert np.abs(again[0].get_weights()[0] - members[0].get_weights()[0]).max() > 1e-3


def test_a_registry_member_trains_and_predicts_the_mixture():
    model = build(num_members=2, member="mc_dropout_mlp_heteroscedastic", hidden_units=(4,),
                  member_options={"rate": 0.1})
    members = ensembles.members_of(model)
    assert [layer.rate for layer in tfp_bnn.bayesian_layers(members[1])] == [0.1, 0.1]
    assert not model.get_layer("members").vectorized
    history = model.fit(X, Y, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    pred = tfp_bnn.predict.regression(model, X, num_samples=4)
    assert pred.mean.shape == (32, 1) and np.all(pred.epistemic_variance > 0)


def test_classification_sums_the_member_cross_entropies():
    model = build(task="classification", num_classes=3, num_members=2, hidden_units=(4,))
    labels = RNG.integers(0, 3, size=32)
    logits = model(X).numpy()
    expected = sum(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        labels, logits[:, m]) for m in range(2))
    loss, accuracy = model.evaluate(X, labels, verbose=0)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    # The predictive is the mean of the members' softmax (exact: deterministic members), and
    # the "accuracy" metric is that mixture's.
    pred = tfp_bnn.predict.classification(model, X, num_samples=2)
    expected_probs = keras.ops.softmax(logits, axis=-1).numpy().mean(axis=1)
    np.testing.assert_allclose(pred.probs, expected_probs, rtol=1e-5, atol=1e-6)
    assert accuracy == pytest.approx(np.mean(expected_probs.argmax(axis=1) == labels))


def test_size_is_checked_for_all_members():
    # One member of ~1e7 weights fits the limit; 10 of them do not.
    with pytest.raises(ValueError, match="deep_ensemble with 10 members of") as error:
        build(input_shape=(4_000,), num_members=10, hidden_units=(2_500,))
    assert f"{limits.MAX_PARAMETERS:.3g}" in str(error.value)


@pytest.mark.parametrize("overrides, message", [
    ({"num_members": 0}, "`num_members` must be an int in 1..100, got 0"),
    ({"member": "mlp_typo"}, "Unknown model 'mlp_typo'"),
    ({"member": "deep_ensemble"}, "cannot be 'deep_ensemble' itself"),
    ({"member_options": {"rate": 0.1}}, "member 'mlp' has no argument 'rate'"),
    ({"member_options": [1]}, "`member_options` must be a dict"),
    ({"member": "bayesian_transformer", "task": "classification", "num_classes": 2},
     "does not support task 'classification'"),
    ({"num_train": None}, "`num_train` must be a positive int, got None"),
])
def test_bad_arguments_fail_in_one_line(overrides, message):
    with pytest.raises(ValueError, match=message) as error:
        build(**overrides)
    assert "\n" not in str(error.value)
