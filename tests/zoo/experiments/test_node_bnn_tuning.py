"""Tests of zoo.experiments.node_bnn_tuning: the validation split, the grid, the ranking."""

import numpy as np
import pytest

from tfp_bnn.data.digits import load_digits
from zoo.experiments import node_bnn_tuning

pytest.importorskip("sklearn")


def test_validation_split_holds_out_training_digits_only():
    data = load_digits(seed=0)
    split = node_bnn_tuning.validation_split(data, seed=0)
    fit, held = split["x_train"], split["x_test"]
    assert len(fit) + len(held) == len(data["x_train"])
    assert len(held) == pytest.approx(0.2 * len(data["x_train"]), abs=10)
    # Fit and validation parts partition the training images (as multisets),
    # so no test image enters unless it is also a training image.
    def rows(x):
        return sorted(row.tobytes() for row in x)
    assert rows(np.concatenate([fit, held])) == rows(data["x_train"])
    labels = np.concatenate([split["y_train"], split["y_test"]])
    assert sorted(labels.tolist()) == sorted(data["y_train"].tolist())
    assert set(np.unique(split["y_test"])) == set(range(10))


def test_settings_are_the_grid_product():
    combos = node_bnn_tuning.settings({"prior_stddev": (0.25, 0.5), "entropy_weight": (1.0,)})
    assert combos == [{"entropy_weight": 1.0, "prior_stddev": 0.25},
                      {"entropy_weight": 1.0, "prior_stddev": 0.5}]
    with pytest.raises(ValueError, match="unknown setting 'learning_rate'"):
        node_bnn_tuning.settings({"learning_rate": (1e-3,)})
    with pytest.raises(ValueError, match="lists no value"):
        node_bnn_tuning.settings({"prior_stddev": ()})


def test_tune_ranks_settings_by_shifted_validation_nll():
    result = node_bnn_tuning.tune(epochs=1, num_samples=2, architectures=["mlp"],
                                  posteriors=["gaussian"],
                                  grid={"prior_stddev": (0.25, 0.5)}, intensities=(5,))
    rows = result["rows"]
    assert [row["prior_stddev"] for row in rows] == [0.25, 0.5]
    assert all(np.isfinite(row["shift_nll"]) and row["shift_nll"] > 0 for row in rows)
    winner = min(rows, key=lambda row: row["shift_nll"])
    assert result["best"] == {("mlp", "gaussian"): {"prior_stddev": winner["prior_stddev"]}}
    assert result["markdown"].count("**") == 2
    assert f"**{winner['shift_nll']:.3f}**" in result["markdown"]


@pytest.mark.parametrize("kwargs, match", [
    ({"architectures": ["rnn"]}, "architectures"),
    ({"posteriors": []}, "posteriors"),
])
def test_bad_choices_are_named(kwargs, match):
    with pytest.raises(ValueError, match=match):
        node_bnn_tuning.tune(epochs=1, **kwargs)


def test_main_rejects_bad_flags(capsys):
    with pytest.raises(SystemExit):
        node_bnn_tuning.main(["--architectures", "mlp,rnn"])
    assert "--architectures must name some of mlp,cnn" in capsys.readouterr().err
