"""The one-standard-error rule by which `zoo.run.auto` chooses one candidate.

Validation log-likelihoods of candidates scored on the same rows differ by a mean that is
itself noisy: another random cut of the training rows could reverse a small lead. The
one-standard-error rule (Breiman et al. 1984, "Classification and Regression Trees", sec.
3.4.3; Hastie, Tibshirani and Friedman 2009, "The Elements of Statistical Learning", sec.
7.10) keeps, among the candidates in prior order, the first whose score is within one
standard error of the best one's, the error here that of the paired per-row differences.
"""

import math

import numpy as np

# The rule's tolerance: the first candidate, in prior order, whose validation log-likelihood is
# within this many standard errors of the best one's, the errors of the paired per-row
# differences. 0 chooses the best mean.
SELECTION_SE = 1.0


def choose(trials, selection_se=SELECTION_SE):
    """The one-standard-error choice among scored `trials` (in prior order).

    The best trial by mean validation log-likelihood leads each other one by the mean
    of the per-row differences, whose standard error is their sample standard deviation
    over the square root of the rows (both scored on the same rows, so the noise the
    rows share cancels). The first trial whose gap is at most `selection_se` standard
    errors is chosen: a later candidate replaces an earlier one only when it is clearly
    better, not by a hair that a different validation cut would reverse.

    Returns:
        (the chosen `Trial`, a tuple of {"name", "gap", "se"} per trial).
    """
    best = max(trials, key=lambda t: t.log_likelihood)  # the first of equals: prior order
    gaps = []
    for trial in trials:
        difference = best.row_log_likelihoods - trial.row_log_likelihoods
        se = float(np.std(difference, ddof=1) / math.sqrt(len(difference))) \
            if len(difference) > 1 else 0.0
        gaps.append({"name": trial.name, "gap": float(np.mean(difference)), "se": se})
    chosen = next(t for t, g in zip(trials, gaps) if g["gap"] <= selection_se * g["se"])
    return chosen, tuple(gaps)
