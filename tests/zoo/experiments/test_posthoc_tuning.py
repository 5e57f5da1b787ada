"""Tests of zoo.experiments.posthoc_tuning: validation only, the candidates, the ranking."""

import numpy as np
import pytest

from tfp_bnn.data.digits import load_digits
from zoo.experiments import posthoc_tuning

pytest.importorskip("sklearn")


class _TestImagesForbidden(dict):
    """load_digits' dict, whose test split raises if anything reads it."""

    def __getitem__(self, key):
        if key in ("x_test", "y_test"):
            raise AssertionError(f"the tuning read the test split ({key})")
        return super().__getitem__(key)


@pytest.fixture(scope="module")
def result():
    patch = pytest.MonkeyPatch()
    patch.setattr(posthoc_tuning, "load_digits",
                  lambda seed: _TestImagesForbidden(load_digits(seed=seed)))
    try:
        # One MOPED candidate with 0 fine-tuning epochs: the conversion alone, no fit
        # (tests/zoo/models/test_posthoc.py fits one); two Laplace candidates to rank.
        return posthoc_tuning.tune(epochs=1, num_samples=2,
                                   grid={"delta": (0.1,), "finetune_epochs": (0,)},
                                   hessians=("kron", "full"), intensities=(5,),
                                   filters=(4, 8), hidden_units=(16,))
    finally:
        patch.undo()


def test_one_row_per_candidate_after_the_base_cnn(result):
    rows = result["rows"]
    assert [(row["model"], row["setting"]) for row in rows] == [
        ("deterministic_cnn", {}),
        ("bayesianized_cnn", {"delta": 0.1, "finetune_epochs": 0}),
        ("laplace_cnn", {"hessian": "kron"}),
        ("laplace_cnn", {"hessian": "full"})]
    for row in rows:
        assert np.isfinite(row["shift_nll"]) and row["shift_nll"] > 0
        assert 0 <= row["shift_accuracy"] <= 1 and 0 <= row["shift_ece"] <= 1


def test_best_is_the_lowest_shifted_validation_nll(result):
    rows = result["rows"]
    for name in ("bayesianized_cnn", "laplace_cnn"):
        winner = min((row for row in rows if row["model"] == name),
                     key=lambda row: row["shift_nll"])
        assert result["best"][name] == winner["setting"]
        assert f"**{winner['shift_nll']:.3f}**" in result["markdown"]
    assert result["markdown"].count("**") == 4  # one winner per post-hoc model
    assert result["markdown"].count("| laplace_cnn | hessian ") == 2


@pytest.mark.parametrize("kwargs, match", [
    ({"grid": {"delta": (0.1,)}}, "`grid` must give values of delta and finetune_epochs"),
    ({"grid": {"delta": (0.0,), "finetune_epochs": (1,)}}, "delta"),
    ({"grid": {"delta": (0.1,), "finetune_epochs": (-1,)}}, "finetune_epochs"),
    ({"hessians": ("diagonal",)}, "hessians"),
])
def test_bad_candidates_are_refused_before_training(kwargs, match):
    with pytest.raises(ValueError, match=match):
        posthoc_tuning.tune(epochs=1, **kwargs)


def test_main_rejects_bad_flags(capsys):
    with pytest.raises(SystemExit):
        posthoc_tuning.main(["--epochs", "0"])
    assert "--epochs must be a positive int" in capsys.readouterr().err
