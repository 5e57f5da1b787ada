"""The configurations `zoo.run.auto` searches: `Candidate` and the default `CANDIDATES`.

A candidate is a registry regression model with builder overrides, a batch size and a step
budget for tables of up to REFERENCE_STEPS_PER_EPOCH batches. `max_epochs(rows)` turns the
budget into epochs: small data gets more epochs, and a larger table gets as many epochs as
a table of REFERENCE_STEPS_PER_EPOCH batches, so its steps grow with its rows (a
10,000-row table trains 50 epochs, 15,600 steps of 32 rows, where a fixed 5,000 steps left
it 16 epochs). Past MAX_STEPS_PER_EPOCH batches the batch grows instead (`batch_for`),
which caps a candidate's steps at MAX_STEPS_PER_EPOCH / REFERENCE_STEPS_PER_EPOCH times
its budget. The defaults are ordered best first by prior evidence (a search whose budget
runs out skips the tail).

Example:
>>> from zoo.run.candidates import CANDIDATES, Candidate
>>> [c.name for c in CANDIDATES][:2]
['mc_dropout_het_50x2_p0.01', 'mc_dropout_het_100_p0.01']
>>> mine = Candidate("mine", "dvi_mlp", {"hidden_units": (20,)}, steps=2000)
>>> mine.max_epochs(500), mine.batch_for(500)
(125, 32)
>>> mine.max_epochs(10_000), mine.batch_for(10_000)   # 313 steps an epoch
(20, 32)
>>> mine.max_epochs(100_000), mine.batch_for(100_000)  # 400 steps an epoch
(20, 250)
"""

import dataclasses
import math

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.data import steps_per_epoch
from zoo.models import registry

# Steps a candidate may take: the ten defaults and a refit take ~2-2.5 minutes on 2 cores
# for a table of < 2,000 rows (~1-6 ms a step; yacht: 714 epochs of its 222 fit rows,
# concrete: 208 of 742). At 3000, concrete's candidates peaked at their last epoch.
STEPS = 5000
MIN_EPOCHS = 4
MAX_EPOCHS = 2000
# A candidate's step budget is for tables of up to this many batches; a larger table gets
# as many epochs (Hernandez-Lobato and Adams 2015 and Lakshminarayanan et al. 2017 trained
# every UCI set for 40 epochs, whatever its size), its steps growing with its rows.
REFERENCE_STEPS_PER_EPOCH = 100
# Above this many batches an epoch the batch grows instead (Lakshminarayanan et al. 2017
# trained sets of up to 515,345 rows with batches of 100): at most 4x the step budget.
MAX_STEPS_PER_EPOCH = 400
# Registry models a candidate may name: regression models that read a table.
REGRESSION_MODELS = tuple(sorted(name for name, spec in registry.SPECS.items()
                                 if "regression" in spec.tasks and "table" in spec.inputs))


def plain(value):
    """`value` with tuples as lists and NumPy scalars as Python numbers (for JSON)."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    return value


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One configuration `select` may choose.

    Attributes:
        name: a label, unique within a candidate list.
        model: a regression model name of `zoo.models.registry`.
        options: builder overrides (hidden_units, rate, learning_rate, ...).
        batch_size: minibatch size on tables of up to MAX_STEPS_PER_EPOCH batches
            (`batch_for` gives the batch of any table).
        steps: step budget on tables of up to REFERENCE_STEPS_PER_EPOCH batches; max
            epochs = steps / min(batches per epoch, REFERENCE_STEPS_PER_EPOCH), clipped.
    """

    name: str
    model: str
    options: dict = dataclasses.field(default_factory=dict)
    batch_size: int = 32
    steps: int = STEPS

    def batch_for(self, num_rows):
        """The batch size on `num_rows` rows: `batch_size`, or larger so that an epoch
        has at most MAX_STEPS_PER_EPOCH steps."""
        return max(self.batch_size, math.ceil(num_rows / MAX_STEPS_PER_EPOCH))

    def max_epochs(self, num_rows):
        """Epochs of a full run on `num_rows` rows: more for small data; from
        REFERENCE_STEPS_PER_EPOCH batches on, the same epochs (and more steps)."""
        per_epoch = min(self.steps_per_epoch(num_rows), REFERENCE_STEPS_PER_EPOCH)
        epochs = round(self.steps / per_epoch)
        return int(min(MAX_EPOCHS, max(MIN_EPOCHS, epochs)))

    def steps_per_epoch(self, num_rows):
        """Batches of one epoch on `num_rows` rows, at `batch_for(num_rows)`."""
        return steps_per_epoch(num_rows, self.batch_for(num_rows))

    def build(self, input_shape, num_train, seed, decay_steps):
        """The compiled model (cosine decay over `decay_steps`), seeded."""
        keras.utils.set_random_seed(seed)  # plain Keras initialisers and the shuffling
        return registry.build_model(self.model, input_shape, task="regression",
                                    num_train=num_train, seed=seed, decay_steps=decay_steps,
                                    **self.options)

    def to_json(self):
        return {"name": self.name, "model": self.model, "options": plain(self.options),
                "batch_size": self.batch_size, "steps": self.steps}


def _candidate(name, model, batch_size=32, **options):
    return Candidate(name, model, options, batch_size)


# Best first by prior evidence, which also decides what a hit budget skips. The first four
# won the UCI table of BENCHMARKS.md (concrete and energy, yacht, kin8nm, wine); then deep
# ensembles (Lakshminarayanan et al. 2017) and DVI (Wu et al. 2019), which the published
# tables put ahead of MC dropout on several datasets; then homoscedastic and Bayes-by-
# Backprop variants for data whose noise does not depend on x.
CANDIDATES = (
    _candidate("mc_dropout_het_50x2_p0.01", "mc_dropout_mlp_heteroscedastic",
               hidden_units=(50, 50), rate=0.01, learning_rate=3e-3),
    _candidate("mc_dropout_het_100_p0.01", "mc_dropout_mlp_heteroscedastic",
               hidden_units=(100,), rate=0.01, learning_rate=3e-3),
    _candidate("flipout_het_100x2", "flipout_mlp_heteroscedastic", batch_size=64,
               hidden_units=(100, 100), learning_rate=3e-3),
    _candidate("mc_dropout_het_50_p0.05_lr1e-3", "mc_dropout_mlp_heteroscedastic",
               hidden_units=(50,), rate=0.05, learning_rate=1e-3),
    _candidate("deep_ensemble_5x50", "deep_ensemble", num_members=5, hidden_units=(50,),
               learning_rate=3e-3),
    _candidate("dvi_50", "dvi_mlp", hidden_units=(50,), learning_rate=3e-3),
    _candidate("dvi_100", "dvi_mlp", hidden_units=(100,), learning_rate=3e-3),
    _candidate("mc_dropout_50_p0.05_lr1e-3", "mc_dropout_mlp", hidden_units=(50,),
               rate=0.05, learning_rate=1e-3),
    _candidate("bbb_het_50x2", "bbb_mlp_heteroscedastic", hidden_units=(50, 50),
               learning_rate=3e-3),
    _candidate("flipout_50", "flipout_mlp", hidden_units=(50,), learning_rate=3e-3),
)


def check_candidates(candidates):
    """`candidates` as a tuple, or ValueError naming the first bad one."""
    if isinstance(candidates, Candidate) or not isinstance(candidates, (list, tuple)) \
            or not candidates or not all(isinstance(c, Candidate) for c in candidates):
        raise ValueError(f"`candidates` must be a non-empty list of Candidate, got "
                         f"{str(candidates)[:80]}.")
    names = [c.name for c in candidates]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise ValueError(f"`candidates` name {repeated[0]!r} twice; names must be unique.")
    for c in candidates:
        if not isinstance(c.options, dict) or "decay_steps" in c.options:
            raise ValueError(f"candidate {c.name!r}: `options` must be a dict of builder "
                             f"arguments without decay_steps (the search sets it), got "
                             f"{str(c.options)[:80]}.")
        check.one_of(f"candidate {c.name!r}: model", c.model, REGRESSION_MODELS)
        registry.check_overrides(c.model, c.options)
        check.integer(f"candidate {c.name!r}: batch_size", c.batch_size)
        check.integer(f"candidate {c.name!r}: steps", c.steps)
    return tuple(candidates)


