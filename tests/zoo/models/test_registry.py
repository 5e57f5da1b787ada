"""Tests of zoo.models.registry: the names, specs and dispatch of the ready models."""

import dataclasses

import keras
import pytest

from tfp_bnn.layers import MCDropout
import zoo
from zoo.models import _common
from zoo.models import registry

NAMES = ["bayesian_lstm_forecaster", "bayesian_transformer", "bbb_mlp", "bbb_mlp_heteroscedastic",
         "deep_ensemble", "dvi_mlp", "flipout_lenet",
         "flipout_mlp", "flipout_mlp_heteroscedastic", "mc_dropout_mlp",
         "mc_dropout_mlp_heteroscedastic", "node_bnn"]


def test_package_reexports_the_registry():
    for name in ["MODELS", "ModelSpec", "SPECS", "build_model", "get_model", "get_spec",
                 "list_models"]:
        assert getattr(zoo, name) is getattr(registry, name), name
    assert zoo.__all__ == sorted(zoo.__all__)
    assert {"build_model", "list_models", "get_spec"} <= set(zoo.__all__)


def test_list_models_is_the_sorted_registry():
    assert zoo.list_models() == NAMES
    assert sorted(zoo.SPECS) == sorted(zoo.MODELS) == NAMES
    for name in NAMES:
        spec = zoo.get_spec(name)
        assert spec is zoo.SPECS[name] and spec.name == name
        assert zoo.get_model(name) is spec.builder is zoo.MODELS[name]


@pytest.mark.parametrize("name", NAMES)
def test_spec_fields_are_meaningful(name):
    spec = zoo.get_spec(name)
    assert spec.tasks and set(spec.tasks) <= set(_common.TASKS)
    assert spec.inputs and set(spec.inputs) <= {"table", "image", "sequence"}
    assert len(set(spec.tasks)) == len(spec.tasks) and len(set(spec.inputs)) == len(spec.inputs)
    assert spec.summary.strip() and "\n" not in spec.summary
    assert spec.paper.strip()
    assert callable(spec.builder)


def test_tasks_inputs_and_sampling_free_per_model():
    both = ("regression", "classification")
    expected_tasks = {name: ("regression",) if name.endswith("_heteroscedastic") else both
                      for name in NAMES}
    expected_tasks["bayesian_transformer"] = ("regression",)
    expected_tasks["bayesian_lstm_forecaster"] = ("regression",)
    expected_tasks["dvi_mlp"] = ("regression",)
    assert {name: zoo.get_spec(name).tasks for name in NAMES} == expected_tasks
    assert zoo.get_spec("flipout_lenet").inputs == ("image",)
    assert zoo.get_spec("bayesian_transformer").inputs == ("table", "sequence")
    assert zoo.get_spec("bayesian_lstm_forecaster").inputs == ("sequence",)
    others = set(NAMES) - {"flipout_lenet", "bayesian_transformer", "bayesian_lstm_forecaster"}
    assert all(zoo.get_spec(n).inputs == ("table", "image", "sequence") for n in others)
    assert [n for n in NAMES if zoo.get_spec(n).sampling_free] == ["bayesian_transformer",
                                                                    "dvi_mlp"]


def test_spec_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        zoo.get_spec("bbb_mlp").tasks = ("regression",)


@pytest.mark.parametrize("name", ["bbb", "BBB_MLP", "", None, 3, ["bbb_mlp"]])
def test_unknown_model_lists_the_available_ones(name):
    for call in (lambda: zoo.get_spec(name), lambda: zoo.get_model(name),
                 lambda: zoo.build_model(name, (8,), num_train=10)):
        with pytest.raises(ValueError, match="Unknown model") as info:
            call()
        assert repr(name) in str(info.value)
        for known in NAMES:
            assert repr(known) in str(info.value)


@pytest.mark.parametrize("name, task", [
    ("bbb_mlp_heteroscedastic", "classification"),
    ("mc_dropout_mlp_heteroscedastic", "classification"),
    ("bayesian_transformer", "classification"),
    ("bayesian_lstm_forecaster", "classification"),
    ("bbb_mlp", "ranking"),
    ("flipout_mlp", None),
])
def test_unsupported_task_names_the_task(name, task):
    with pytest.raises(ValueError, match="task") as info:
        zoo.build_model(name, (8,), task=task, num_classes=3, num_train=10)
    assert repr(task) in str(info.value)
    for supported in zoo.get_spec(name).tasks:
        assert supported in str(info.value)


def test_build_model_forwards_arguments_and_overrides():
    model = zoo.build_model("mc_dropout_mlp", (5,), task="classification", num_classes=4,
                            num_train=300, seed=2, hidden_units=(7, 3), rate=0.2,
                            learning_rate=0.01)
    assert isinstance(model, keras.Model) and model.name == "mc_dropout_mlp"
    dense = [layer for layer in model.layers if isinstance(layer, keras.layers.Dense)]
    assert [layer.units for layer in dense] == [7, 3, 4]
    assert model.input_shape == (None, 5)
    dropout = [layer for layer in model.layers if isinstance(layer, MCDropout)]
    assert len(dropout) == 3 and {layer.rate for layer in dropout} == {0.2}
    assert float(model.optimizer.learning_rate.numpy()) == pytest.approx(0.01)


def test_build_model_defaults_to_regression():
    model = zoo.build_model("flipout_mlp", (3,), num_train=10)
    assert model.output_shape == (None, 2)


@pytest.mark.parametrize("name, override", [
    ("bbb_mlp", "rate"),
    ("mc_dropout_mlp", "prior"),
    ("flipout_lenet", "width"),
    # Fixed by the registered variant: not an override.
    ("bbb_mlp", "heteroscedastic"),
    ("node_bnn", "posterior"),
])
def test_an_override_the_builder_does_not_take_is_named(name, override):
    task = "classification" if name == "flipout_lenet" else "regression"
    with pytest.raises(ValueError, match=override) as info:
        zoo.build_model(name, (8, 8, 1), task=task, num_classes=3 if task != "regression"
                        else None, num_train=10, **{override: 0.1})
    assert "learning_rate" in str(info.value)  # the accepted ones are listed


def test_node_bnn_takes_its_node_settings_as_overrides():
    model = zoo.build_model("node_bnn", (4,), num_train=10, prior_stddev=0.3,
                            num_components=2, hidden_units=(3,))
    layers = [layer for layer in model.layers if hasattr(layer, "num_components")]
    assert len(layers) == 2
    assert {(layer.prior_stddev, layer.num_components) for layer in layers} == {(0.3, 2)}
