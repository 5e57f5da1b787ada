"""Tests of zoo.run.auto_rule: the one-standard-error choice on scripted per-row
log-likelihoods, its standard error computed apart from the rule."""

import numpy as np
import pytest

from zoo.run import auto
from zoo.run import auto_rule


def _scored(name, rows):
    rows = np.asarray(rows, dtype=np.float64)
    return auto.Trial(name, float(np.mean(rows)), 1.0, 1, 1, 0.0, (), row_log_likelihoods=rows)


def test_the_one_standard_error_rule_keeps_an_earlier_candidate_a_later_one_leads_by_a_hair():
    # Paired rows: the later candidate leads by 0.02 on the mean, but its per-row
    # differences scatter with sd 1, so over 400 rows the lead's s.e. is ~0.05.
    rng = np.random.default_rng(0)
    base = rng.normal(-1.0, 0.5, size=400)
    noise = rng.normal(0.0, 1.0, size=400)
    noise -= noise.mean() - 0.02  # the lead exactly 0.02
    early, late = _scored("early", base), _scored("late", base + noise)
    chosen, gaps = auto_rule.choose((early, late))
    expected_se = np.std(noise, ddof=1) / np.sqrt(400)  # computed apart from `choose`
    assert chosen is early
    assert gaps[0]["name"] == "early" and gaps[0]["gap"] == pytest.approx(0.02, abs=1e-12)
    assert gaps[0]["se"] == pytest.approx(expected_se, rel=1e-12)
    assert gaps[1] == {"name": "late", "gap": 0.0, "se": 0.0}
    # Tolerance 0 is the best mean; a tolerance just under gap / se also picks the later.
    assert auto_rule.choose((early, late), 0.0)[0] is late
    assert auto_rule.choose((early, late), 0.99 * 0.02 / expected_se)[0] is late
    assert auto_rule.choose((early, late), 1.01 * 0.02 / expected_se)[0] is early


def test_the_one_standard_error_rule_takes_a_later_candidate_that_is_clearly_better():
    rng = np.random.default_rng(1)
    base = rng.normal(-1.0, 0.5, size=400)
    lead = 0.3 + rng.normal(0.0, 0.1, size=400)  # mean lead 0.3, s.e. ~0.005
    first, middle, last = (_scored("first", base), _scored("middle", base + lead),
                           _scored("last", base + lead + 0.001))
    # `middle` trails `last` by a constant 0.001 (s.e. 0): not within, so `last`.
    assert auto_rule.choose((first, middle, last))[0] is last
    # With a per-row scatter around that 0.001, `middle`, earlier, is within one s.e.
    wobble = rng.normal(0.0, 0.2, size=400)
    last = _scored("last", base + lead + 0.001 + wobble - wobble.mean())
    assert auto_rule.choose((first, middle, last))[0] is middle


def test_auto_chooses_by_this_rule():
    assert auto.choose is auto_rule.choose and auto.SELECTION_SE == auto_rule.SELECTION_SE == 1.0
