"""Shared cases of the `zoo.run.auto` tests: two tiny candidates and a small table.

A homoscedastic MC dropout MLP whose learning rate (1e-6) leaves it untrained, listed
first, and a heteroscedastic one trained at 1e-2, on data whose noise grows with |x1|.
"""

import dataclasses

import numpy as np

from zoo.run.auto import Candidate

UNTRAINED = Candidate("untrained", "mc_dropout_mlp",
                      {"hidden_units": (4,), "learning_rate": 1e-6}, batch_size=32, steps=40)
HETEROSCEDASTIC = Candidate("heteroscedastic", "mc_dropout_mlp_heteroscedastic",
                            {"hidden_units": (16,), "rate": 0.01, "learning_rate": 1e-2},
                            batch_size=32, steps=60)
TINY = (UNTRAINED, HETEROSCEDASTIC)


def data(rows, seed):
    # y = 50 + 10 (2 x0 + (0.1 + |x1|) e): data units far from standardised ones.
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(rows, 3))
    return x, 50.0 + 10.0 * (2.0 * x[:, 0] + (0.1 + np.abs(x[:, 1])) * rng.normal(size=rows))


X, Y = data(120, 0)
X_TEST, Y_TEST = data(40, 1)


def without_seconds(selection):
    # Wall times differ between runs; everything else must not.
    return dataclasses.replace(selection, seconds=0.0, trials=tuple(
        dataclasses.replace(t, seconds=0.0) for t in selection.trials))
