"""Tests of zoo.run.candidates: the configurations `zoo.run.auto` searches."""

import json

import keras
import pytest

from zoo.run import candidates
from zoo.run.candidates import CANDIDATES
from zoo.run.candidates import Candidate


def test_every_default_candidate_builds_through_the_registry():
    names = [c.name for c in CANDIDATES]
    assert len(set(names)) == len(names) and 8 <= len(names) <= 12
    assert candidates.check_candidates(CANDIDATES) == CANDIDATES
    families = {c.model.split("_mlp")[0] for c in CANDIDATES}
    assert families == {"mc_dropout", "flipout", "bbb", "deep_ensemble", "dvi"}
    # No keras.backend.clear_session() between builds: it runs a full gc.collect()
    # (0.24 s a build alone, more in a test worker's grown heap: 0.35 s with 3M more
    # objects), and ten small models are nothing to keep.
    for candidate in CANDIDATES:
        model = candidate.build((8,), num_train=100, seed=0, decay_steps=50)
        assert isinstance(model, keras.Model) and model.optimizer is not None, candidate.name


def test_epochs_come_from_the_step_budget():
    candidate = Candidate("c", "dvi_mlp", {}, batch_size=32, steps=2000)
    assert candidate.max_epochs(100) == 500  # 4 batches an epoch
    assert candidate.max_epochs(1000) == 62  # 32 batches an epoch: 62.5 rounds to even
    assert Candidate("c", "dvi_mlp", steps=10**6).max_epochs(10) == candidates.MAX_EPOCHS
    assert Candidate("c", "dvi_mlp", steps=100).max_epochs(10**5) == candidates.MIN_EPOCHS


@pytest.mark.parametrize("rows, batch, per_epoch", [
    (3201, 32, 101), (10_000, 32, 313), (12_800, 32, 400), (45_730, 115, 398),
    (10**6, 2500, 400)])
def test_large_tables_get_the_epochs_of_a_100_batch_table(rows, batch, per_epoch):
    # Past 100 batches an epoch the steps grow with the rows (a fixed step budget left a
    # 10,000-row table 16 epochs); past 400 the batch grows instead.
    candidate = Candidate("c", "dvi_mlp", {}, batch_size=32, steps=2000)
    assert (candidate.batch_for(rows), candidate.steps_per_epoch(rows)) == (batch, per_epoch)
    assert candidate.max_epochs(rows) == 20 == candidate.max_epochs(3200)
    assert candidate.steps_per_epoch(3200) == candidates.REFERENCE_STEPS_PER_EPOCH


def test_a_candidate_is_plain_json():
    text = json.dumps([c.to_json() for c in CANDIDATES], allow_nan=False)
    first = json.loads(text)[0]
    assert first["options"]["hidden_units"] == [50, 50]
    assert first["model"] == "mc_dropout_mlp_heteroscedastic"


@pytest.mark.parametrize("bad, message", [
    ((), "`candidates` must be a non-empty list"),
    (CANDIDATES[0], "`candidates` must be a non-empty list"),
    ((CANDIDATES[0], CANDIDATES[0]), "twice"),
    ((Candidate("img", "flipout_lenet"),), "candidate 'img': model"),
    ((Candidate("c", "dvi_mlp", {"decay_steps": 5}),), "without decay_steps"),
    ((Candidate("c", "dvi_mlp", {"rate": 0.1}),), "has no argument 'rate'"),
    ((Candidate("c", "dvi_mlp", batch_size=0),), "candidate 'c': batch_size"),
    ((Candidate("c", "dvi_mlp", steps=1.5),), "candidate 'c': steps"),
])
def test_bad_candidates_are_refused_in_one_line(bad, message):
    with pytest.raises(ValueError, match=message) as error:
        candidates.check_candidates(bad)
    assert "\n" not in str(error.value)
