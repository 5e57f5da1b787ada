"""Tests of the main job's BBB MLP (`zoo.models.bbb`) and `python -m zoo` without a subcommand."""

import math
import os
import pathlib
import re
import subprocess
import sys

import keras
import numpy as np
import pytest

from tfp_bnn.layers import DenseReparameterization
from tfp_bnn.losses import GaussianNLL
from tfp_bnn.priors import ScaleMixturePrior
from zoo.experiments import main_job as cli
from zoo.models.bbb import bbb_mlp

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
RMSE_RE = re.compile(r"test RMSE (\S+) MPa")
LL_RE = re.compile(r"test log-likelihood (\S+) nats")


def _scores(text):
    rmse = RMSE_RE.search(text)
    ll = LL_RE.search(text)
    assert rmse and ll, f"no scores in the output:\n{text}"
    return float(rmse.group(1)), float(ll.group(1))


def test_bbb_mlp_structure():
    model = bbb_mlp(8, hidden_units=(16, 8), num_train=100, seed=3)
    layers = [layer for layer in model.layers if isinstance(layer, DenseReparameterization)]
    assert [layer.units for layer in layers] == [16, 8, 2]
    for layer in layers:
        assert isinstance(layer.prior, ScaleMixturePrior)
        assert layer.kl_estimator == "mc"
        assert float(layer.kl_weight.numpy()) == pytest.approx(1 / 100)
    assert isinstance(model.loss, GaussianNLL)
    assert model.output_shape == (None, 2)
    # Seeds of different layers differ, so no two layers share a noise stream.
    assert len({layer.seed for layer in layers}) == len(layers)


# An unbuilt optimizer is saved with fewer variables than the compiled
# model rebuilds on load; Keras warns, and nothing is lost.
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
def test_bbb_mlp_is_reproducible_and_round_trips(tmp_path):
    x = np.random.default_rng(0).normal(size=(4, 8)).astype(np.float32)
    first = bbb_mlp(8, hidden_units=(8,), num_train=10, seed=1)
    second = bbb_mlp(8, hidden_units=(8,), num_train=10, seed=1)
    for a, b in zip(first.get_weights(), second.get_weights()):
        np.testing.assert_array_equal(a, b)
    path = tmp_path / "bbb.keras"
    first.save(path)
    restored = keras.saving.load_model(path, safe_mode=True)
    for a, b in zip(first.get_weights(), restored.get_weights()):
        np.testing.assert_array_equal(a, b)
    assert isinstance(restored.loss, GaussianNLL)
    assert restored(x).shape == (4, 2)


@pytest.mark.parametrize(
    "kwargs, name",
    [({"num_train": None}, "num_train"), ({"num_train": 0}, "num_train"),
     ({"num_train": 5, "hidden_units": (0,)}, "hidden_units"),
     ({"num_train": 5, "learning_rate": -1.0}, "learning_rate"),
     ({"num_train": 5, "seed": -1}, "seed"), ({"num_train": 5, "decay_steps": 0}, "decay_steps")],
)
def test_bbb_mlp_validates_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        bbb_mlp(8, **kwargs)


def test_cli_main_few_epochs_prints_finite_scores(capsys):
    assert cli.main(["--epochs", "5", "--seed", "1", "--samples", "20"]) == 0
    out = capsys.readouterr().out
    rmse, ll = _scores(out)
    assert math.isfinite(rmse) and rmse > 0
    assert math.isfinite(ll)
    assert "wall time" in out
    assert "927 train / 103 test" in out


def test_cli_rejects_bad_flags(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--epochs", "0"])
    assert "--epochs must be a positive int" in capsys.readouterr().err


@pytest.mark.slow
def test_default_python_m_zoo_reaches_the_quality_bar():
    # The published concrete RMSEs are 7.19 (VI) and 5.23 (MC dropout).
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(REPO_ROOT)] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
    ))
    result = subprocess.run(
        [sys.executable, "-m", "zoo"], cwd=REPO_ROOT, env=env,
        capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    rmse, ll = _scores(result.stdout)
    assert rmse <= 6.5, result.stdout
    assert math.isfinite(ll), result.stdout
