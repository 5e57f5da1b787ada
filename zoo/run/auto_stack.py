"""`auto`'s stack: the search's candidates mixed with weights fitted on the validation rows.

The search (`zoo.run.auto.select`) trains every candidate on the fit part of the training
rows and records each one's predictive log-density of every validation row (at its best
check). Rather than keep one candidate, `auto` mixes them: the stacking weights w on the
simplex maximise the validation rows' mean log-density of the mixture,

    max_w  (1/n) sum_i log sum_k w_k p_k(y_i | x_i),

the stacking of predictive distributions of Yao, Vehtari, Simpson and Gelman (2018,
Bayesian Analysis 13(3), "Using stacking to average Bayesian predictive distributions",
sec. 3; Breiman's 1996 stacked regressions with the log score). The objective is concave
in w, and `stacking_weights` climbs it by the EM fixed point of a mixture's weights
(Dempster, Laird and Rubin 1977): w_k <- mean_i of w_k p_ik / sum_j w_j p_ij, which raises
it at every step and converges to the maximum; the iteration is deterministic. Candidates
whose weight ends below MIN_WEIGHT are dropped and the rest renormalised, so the stack
trains (and refits) only the members that matter. A stack whose weight is all on one
candidate is that candidate alone.

Where candidates err in different ways (a noisy target, early stopping that picks its
check on a few hundred rows), the mixture scores above its best member: on the 20 standard
splits of concrete, energy, wine-quality-red and yacht the refitted stack's test
log-likelihood was 0.03 to 0.10 nats above that of the one candidate the
one-standard-error rule chose (BENCHMARKS.md). The weights are fitted on the rows the
members were early-stopped on, as the choice of one candidate was.

`Stack` holds the members (built Keras models, trained on data standardised by one pair of
`tfp_bnn.data.Standardizer`s) and their weights, and predicts the weighted mixture as one
`tfp_bnn.predict.RegressionPrediction`: of T samples, member k contributes about w_k T
(`sample_counts`), so the equal-weight mixture of all samples is the weighted mixture of
the members, to within one sample (a deep ensemble of M members, whose mixture is its M
samples, contributes a multiple of M).
"""

import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.predict import RegressionPrediction
from zoo.run import scoring

# Members whose stacking weight is below this are dropped (the rest renormalised).
MIN_WEIGHT = 0.05
# The EM iteration stops when the objective gains less than TOLERANCE nats in a step, or
# after MAX_ITERATIONS steps.
TOLERANCE = 1e-10
MAX_ITERATIONS = 10_000


def _logsumexp(values, axis, keepdims=False):
    return np.logaddexp.reduce(values, axis=axis, keepdims=keepdims)


def _objective(log_weights, row_log_densities):
    return float(np.mean(_logsumexp(log_weights + row_log_densities, axis=1)))


def stacking_weights(row_log_densities, min_weight=MIN_WEIGHT):
    """The stacking weights of K predictive distributions from their log-densities of n rows.

    Args:
        row_log_densities: array [n, K]: log p_k(y_i | x_i) of row i under candidate k,
            finite (in the data's units: every candidate the same units).
        min_weight: weights below it are set to 0 and the rest renormalised (0 keeps all).

    Returns:
        float64 array [K] on the simplex (sums to 1).

    Example:
    >>> # Candidate 0 fits rows 0-1 best, candidate 1 rows 2-3: a half-half mixture.
    >>> logs = np.log([[0.9, 0.1], [0.9, 0.1], [0.1, 0.9], [0.1, 0.9]])
    >>> np.round(stacking_weights(logs), 6).tolist()
    [0.5, 0.5]
    """
    logs = check.array("row_log_densities", row_log_densities).astype(np.float64)
    if logs.ndim != 2 or 0 in logs.shape:
        raise ValueError(f"`row_log_densities` must be [rows, candidates] with at least one "
                         f"of each, got shape {logs.shape}.")
    if not np.all(np.isfinite(logs)):
        raise ValueError("`row_log_densities` has a NaN or infinite value: stack only "
                         "candidates with a finite log-density of every row.")
    min_weight = check.number("min_weight", min_weight, 0.0, 1.0, high_open=True)
    count = logs.shape[1]
    log_weights = np.full(count, -np.log(count))
    value = _objective(log_weights, logs)
    for _ in range(MAX_ITERATIONS):
        joint = log_weights + logs
        responsibilities = joint - _logsumexp(joint, axis=1, keepdims=True)
        log_weights = _logsumexp(responsibilities, axis=0) - np.log(len(logs))
        new = _objective(log_weights, logs)
        if new - value < TOLERANCE:
            break
        value = new
    weights = np.exp(log_weights - _logsumexp(log_weights, axis=0))
    weights[weights < min_weight] = 0.0
    if not weights.any():  # every weight under the threshold: keep the largest
        weights[np.argmax(log_weights)] = 1.0
    return weights / weights.sum()


def sample_counts(weights, granularities, num_samples):
    """Per member, the samples of a T = `num_samples` mixture: about w_k T, at least one
    and a multiple of the member's granularity (its M for an ensemble of M)."""
    counts = []
    for weight, granularity in zip(weights, granularities):
        units = max(1, int(np.floor(weight * num_samples / granularity + 0.5)))
        counts.append(units * granularity)
    return counts


class Stack:
    """The weighted mixture of member models trained on the same standardised data.

    Args:
        members: built Keras regression models (their predictive as `zoo.run.scoring.predict`
            forms it).
        weights: their mixture weights, > 0, summing to 1.
        x_scaler, y_scaler: the `tfp_bnn.data.Standardizer`s the members' data went through.
        names: the members' candidate names (for the record).
    """

    def __init__(self, members, weights, x_scaler, y_scaler, names=None):
        weights = np.asarray(weights, np.float64)
        if len(members) < 1 or len(weights) != len(members):
            raise ValueError(f"A stack needs one weight per member, got {len(members)} "
                             f"member(s) and {len(weights)} weight(s).")
        if np.any(weights <= 0) or not np.isclose(weights.sum(), 1.0):
            raise ValueError(f"Stack weights must be > 0 and sum to 1, got {weights.tolist()}.")
        self.members, self.weights = tuple(members), weights
        self.x_scaler, self.y_scaler = x_scaler, y_scaler
        self.names = tuple(names) if names is not None else tuple(
            f"member_{k}" for k in range(len(members)))

    def record(self):
        """{name: weight} of the members, for results.json."""
        return {name: float(w) for name, w in zip(self.names, self.weights)}

    def predict_standardized(self, x, num_samples=100):
        """The mixture's predictive at standardised inputs `x`, on standardised targets (a
        one-member stack: that member's own predictive of `num_samples`)."""
        if len(self.members) == 1:
            return scoring.predict(self.members[0], x, num_samples)[0]
        granularities = [scoring.monte_carlo_samples(m, 1) for m in self.members]
        counts = sample_counts(self.weights, granularities, num_samples)
        means, variances = [], []
        for member, count in zip(self.members, counts):
            prediction, _ = scoring.predict(member, x, count)
            repeats = count // prediction.num_samples  # a fixed sample set is repeated
            means.extend([prediction.sample_means] * repeats)
            variances.extend([prediction.sample_variances] * repeats)
        return RegressionPrediction(np.concatenate(means), np.concatenate(variances))

    def predict(self, x, num_samples=100):
        """The mixture's predictive at raw inputs `x`, in the target's units."""
        prediction = self.predict_standardized(
            self.x_scaler.transform(x).astype("float32"), num_samples)
        return prediction.rescale(float(self.y_scaler.mean), float(self.y_scaler.std))


def members(trials, candidates, min_weight=MIN_WEIGHT):
    """The stack of a search: (candidate, trial, weight) per member, in the search's order.

    Args:
        trials: the search's `Trial`s; those without a finite validation log-likelihood
            are left out, the others must hold `row_log_likelihoods` of the same rows.
        candidates: the `Candidate`s searched (each trial's is found by name).
        min_weight: as in `stacking_weights`.
    """
    scored = [t for t in trials if t.log_likelihood is not None]
    if not scored:
        raise ValueError("A stack needs at least one trial with a finite validation "
                         "log-likelihood.")
    weights = stacking_weights(np.stack([t.row_log_likelihoods for t in scored], axis=1),
                               min_weight)
    by_name = {c.name: c for c in candidates}
    return tuple((by_name[t.name], t, float(w)) for t, w in zip(scored, weights) if w > 0)
