"""Diversity of an ensemble's members: how often two of them predict different classes.

Exported as `tfp_bnn.metrics.disagreement`.
"""

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.metrics._scores import _check_probs


def disagreement(member_probs) -> float:
    """Fraction of member pairs and points where the two members predict different classes.

    With yhat_mi the arg max of member m's probabilities at point i (the
    lowest class index on ties), over the M (M - 1) / 2 pairs of members:

        D = mean_i mean_{m < m'} [yhat_mi != yhat_m'i]
          = 1 - mean_i sum_k c_ik (c_ik - 1) / (M (M - 1))

    with c_ik the number of members predicting class k at point i (the
    pairwise disagreement of Fort et al. 2019, torch-uncertainty's
    `Disagreement`). 0 when all members agree everywhere, 1 when no two
    members agree anywhere (possible only with M <= K classes).

    Args:
        member_probs: the members' predictive probabilities, shape [M, N, K]
            with M >= 2 members (an ensemble's members or Monte Carlo
            samples), rows summing to 1.

    Returns:
        The disagreement, a float in [0, 1].

    Example:
    >>> member_probs = [[[0.9, 0.1], [0.4, 0.6]],    # member 0 predicts 0, 1
    ...                 [[0.8, 0.2], [0.7, 0.3]],    # member 1 predicts 0, 0
    ...                 [[0.3, 0.7], [0.2, 0.8]]]    # member 2 predicts 1, 1
    >>> round(disagreement(member_probs), 4)   # 2 of 3 pairs disagree at each point
    0.6667
    """
    member_probs = check.array("member_probs", member_probs)
    if member_probs.ndim != 3 or member_probs.shape[0] < 2:
        raise ValueError(
            "`member_probs` must have shape [M, N, K] with M >= 2 members, got shape "
            f"{member_probs.shape}."
        )
    num_members, _, num_classes = member_probs.shape
    counts = 0
    for m in range(num_members):
        # Members one at a time, each checked as `probs` is; the error names the member.
        probs = _check_probs(member_probs[m], name=f"member_probs[{m}]")
        counts = counts + np.eye(num_classes)[probs.argmax(axis=1)]
    agreeing = np.sum(counts * (counts - 1.0), axis=1) / (num_members * (num_members - 1.0))
    return float(1.0 - np.mean(agreeing))
