"""Threshold-based out-of-distribution detection scores: AUPR and FPR at 95% TPR.

Out-of-distribution (OOD) inputs are the positives and a higher score means "more likely
OOD", as for `auroc` (in `_scores.py`), whose input check the three share. An input is
flagged OOD at threshold t when its score is >= t; the thresholds are the distinct pooled
scores, so tied inputs are always flagged together. Exported as `tfp_bnn.metrics.<name>`.
"""

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.metrics._scores import _check_scores


def _counts_at_thresholds(scores_in, scores_out):
    """(OOD flagged, in-distribution flagged) at each distinct score, thresholds descending.

    Entry j counts the scores >= the j-th largest distinct pooled score.
    """
    pooled = np.concatenate([scores_in, scores_out])
    is_out = np.concatenate([np.zeros(scores_in.size), np.ones(scores_out.size)])
    order = np.argsort(-pooled, kind="stable")
    pooled, is_out = pooled[order], is_out[order]
    # The last position of each run of equal scores: one threshold per distinct value.
    last = np.flatnonzero(np.append(pooled[1:] != pooled[:-1], True))
    true_pos = np.cumsum(is_out)[last]
    false_pos = (last + 1) - true_pos
    return true_pos, false_pos


def aupr(scores_in, scores_out) -> float:
    """Area under the precision-recall curve for detecting OOD inputs (average precision).

    OOD inputs are the positives. With thresholds t_1 > t_2 > ... the
    distinct pooled scores, recall R_j and precision P_j of the rule
    "score >= t_j", and R_0 = 0, the area is the step-wise sum

        AUPR = sum_j (R_j - R_{j-1}) P_j

    (the "AUPR-Out" of Hendrycks and Gimpel 2017, as the average
    precision of scikit-learn's `average_precision_score`), not a
    trapezoidal interpolation, which is optimistic. Tied scores form one
    threshold. Chance level is the fraction of OOD inputs, m / (n + m).

    Args:
        scores_in: scores of in-distribution inputs, 1-D, finite, non-empty.
        scores_out: scores of out-of-distribution inputs, 1-D, finite, non-empty.

    Returns:
        The AUPR, a float in (0, 1].

    Example:
    >>> aupr([0.1, 0.4], [0.35, 0.8])   # thresholds .8, .4, .35: (1/2) 1 + 0 + (1/2)(2/3)
    0.8333333333333333
    """
    scores_in, scores_out = _check_scores(scores_in, scores_out)
    true_pos, false_pos = _counts_at_thresholds(scores_in, scores_out)
    precision = true_pos / (true_pos + false_pos)
    recall_gain = np.diff(true_pos, prepend=0.0) / scores_out.size
    return float(np.sum(recall_gain * precision))


def fpr_at_95_tpr(scores_in, scores_out, tpr: float = 0.95) -> float:
    """False-positive rate on in-distribution inputs once `tpr` of the OOD inputs are caught.

    Lowering the threshold t from the top score, the first t whose
    true-positive rate (the fraction of OOD scores >= t) reaches `tpr` is
    taken, and the result is the fraction of in-distribution scores >= t
    there (Hendrycks and Gimpel 2017; Liang et al. 2018):

        FPR@TPR = FPR(t*),  t* = max { t : TPR(t) >= tpr }

    The TPR only grows as t falls, so this is the smallest FPR at which the
    TPR is reached. Lower is better; 0 means the two sets are separated at
    that recall. Ties are one threshold: a run of equal scores is flagged
    together.

    Args:
        scores_in: scores of in-distribution inputs, 1-D, finite, non-empty.
        scores_out: scores of out-of-distribution inputs, 1-D, finite, non-empty.
        tpr: the true-positive rate to reach, a number in (0, 1].

    Returns:
        The false-positive rate, a float in [0, 1].

    Example:
    >>> scores_in = [0.1, 0.2, 0.3, 0.6]
    >>> scores_out = [0.5, 0.7, 0.8, 0.9]
    >>> fpr_at_95_tpr(scores_in, scores_out)   # all 4 OOD caught at t = .5, with 1 of 4 in
    0.25
    >>> fpr_at_95_tpr(scores_in, scores_out, tpr=0.75)   # 3 of 4 at t = .7, no in-distribution
    0.0
    """
    tpr = check.number("tpr", tpr, 0, 1, low_open=True)
    scores_in, scores_out = _check_scores(scores_in, scores_out)
    true_pos, false_pos = _counts_at_thresholds(scores_in, scores_out)
    # k / m is correctly rounded, as the literal tpr is: 19 / 20 == 0.95, so a TPR
    # of exactly 95% counts as reached.
    reached = int(np.searchsorted(true_pos / scores_out.size, tpr, side="left"))
    return float(false_pos[reached] / scores_in.size)
