"""Tests of zoo.run.auto_choice: a `train auto` run's choice, stored and reused.

The whole interrupted-and-resumed run is tests/zoo/run/test_runner_interruption.py; here
the two functions on their own.
"""

import json

import pytest

from tests.zoo.run.auto_cases import HETEROSCEDASTIC
from tests.zoo.run.auto_cases import X
from tests.zoo.run.auto_cases import Y
from zoo.run import auto
from zoo.run import auto_choice

KEY = {"seed": 1, "budget_steps": 1000, "budget_minutes": None}


def test_a_stored_choice_under_the_same_key_is_reused_without_a_search(tmp_path, monkeypatch):
    monkeypatch.setattr(auto, "CANDIDATES", (HETEROSCEDASTIC,))
    choice = auto_choice.run_choice(X, Y, KEY, str(tmp_path / "backup"))
    # The run trains on all 120 rows: the candidate's batch there, the search's epochs.
    assert choice["batch_size"] == HETEROSCEDASTIC.batch_for(len(X)) == 32
    assert choice["model"] == HETEROSCEDASTIC.model and choice["key"] == KEY
    assert choice["epochs"] == choice["selection"]["epochs"]
    auto_choice.store_choice(str(tmp_path / "backup"), choice)

    def no_search(*args, **kwargs):
        raise AssertionError("searched again")
    monkeypatch.setattr(auto, "select", no_search)
    assert auto_choice.run_choice(X, Y, KEY, str(tmp_path / "backup")) == json.loads(
        json.dumps(choice))
    with pytest.raises(AssertionError, match="searched again"):  # another key: a search
        auto_choice.run_choice(X, Y, dict(KEY, budget_steps=999), str(tmp_path / "backup"))


def test_store_choice_never_replaces_a_stored_file(tmp_path):
    backup = tmp_path / "backup"
    auto_choice.store_choice(str(backup), {"model": "first"})
    auto_choice.store_choice(str(backup), {"model": "second"})
    assert json.loads((backup / auto_choice.CHOICE_FILE).read_text()) == {"model": "first"}
    assert sorted(p.name for p in backup.iterdir()) == [auto_choice.CHOICE_FILE]
