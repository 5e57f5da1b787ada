"""`SplitConformalClassifier`: prediction sets of classes with a coverage guarantee.

Split conformal classification: held-out calibration rows (label y_i, class probabilities
p_i) give the score of each row's label, and Q, their conformal quantile
(`tfp_bnn.conformal.conformal_quantile`); a new point's set holds every class k whose score
is at most Q. Three scores, with pi_(1) >= pi_(2) >= ... the sorted probabilities of a row
and r(k) the rank of class k (1 for the most probable; ties in probability are ranked by
class index):

    "lac"   1 - p_k                                  (least ambiguous set-valued
                                                     classifier, Sadinle et al. 2019)
    "aps"   sum_{j < r(k)} pi_(j) + u pi_(r(k))     (adaptive prediction sets,
                                                     Romano, Sesia and Candes 2020)
    "raps"  the APS score + lam max(0, r(k) - k_reg) (regularized APS,
                                                     Angelopoulos et al. 2021)

with u ~ Uniform(0, 1), one draw per row, when `randomized=True` (the papers' default):
the scores are then continuous and the coverage is exact. With `randomized=False` the
calibration scores take u = 1 (the mass up to and including the label) and the sets take
u = 0 (the mass above the class), the papers' deterministic sets: the smallest prefix of
classes whose score reaches Q, never empty for APS (nor for RAPS with k_reg >= 1), with
coverage >= 1 - alpha but above the upper bound below. LAC sets are deterministic (no u)
and may be empty; randomized APS and RAPS sets may be empty too.

For a test row exchangeable with the n calibration rows, P(y in set) >= 1 - alpha, and
<= 1 - alpha + 1 / (n + 1) for continuous scores (LAC on continuous probabilities,
randomized APS and RAPS). LAC gives the smallest sets on average when the probabilities
are right; APS adapts the set size to each row's uncertainty (closer to coverage given x);
RAPS's penalty keeps unlikely classes out when a model spreads noisy mass over many
classes.
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.conformal import _split
from tfp_bnn.metrics._scores import _check_pair
from tfp_bnn.metrics._scores import _check_probs
from tfp_bnn.predict.classification import ClassificationPrediction

SCORES = ("lac", "aps", "raps")
# RAPS's arguments when score="raps" and they are left None.
DEFAULT_K_REG = 1
DEFAULT_LAM = 0.01


def class_scores(probs, u, lam=0.0, k_reg=0):
    """The (R)APS score of every class: mass above it + u * its probability + penalty.

    Args:
        probs: probabilities [N, K], rows summing to 1.
        u: [N], one value in [0, 1] per row.
        lam: the penalty per rank beyond `k_reg` (0: APS).
        k_reg: the number of top ranks without penalty.

    Returns:
        float64 [N, K], in class order.

    Example:
    >>> class_scores(np.array([[0.2, 0.5, 0.3]]), u=np.array([1.0]))   # ranks 3, 1, 2
    array([[1. , 0.5, 0.8]])
    >>> class_scores(np.array([[0.2, 0.5, 0.3]]), u=np.array([0.0]), lam=1.0, k_reg=1)
    array([[2.8, 0. , 1.5]])
    """
    order = np.argsort(-probs, axis=1, kind="stable")
    ordered = np.take_along_axis(probs, order, axis=1)
    above = np.zeros_like(ordered)
    np.cumsum(ordered[:, :-1], axis=1, out=above[:, 1:])
    ranks = np.arange(1, probs.shape[1] + 1)
    ordered_scores = above + u[:, None] * ordered + lam * np.maximum(0, ranks - k_reg)
    scores = np.empty_like(ordered_scores)
    np.put_along_axis(scores, order, ordered_scores, axis=1)
    return scores


@keras.saving.register_keras_serializable(package="tfp_bnn")
class SplitConformalClassifier(_split.SplitConformal):
    """Split conformal prediction sets (LAC, APS, RAPS) with coverage >= 1 - alpha.

    Fitted on calibration rows the model never saw: for a test row exchangeable with
    them, the set holds its label with probability >= 1 - alpha, and at most
    1 - alpha + 1 / (n + 1) for continuous scores (see the module's text for which).
    With n < 1 / alpha - 1 rows every set holds every class; `fit` warns.

    Args:
        alpha: the miscoverage level, in (0, 1): the sets aim at 1 - alpha.
        score: "lac" (1 - p_y, Sadinle et al. 2019), "aps" (the sorted mass up to the
            label, Romano et al. 2020) or "raps" (APS plus lam * max(0, rank - k_reg),
            Angelopoulos et al. 2021).
        randomized: bool; APS and RAPS draw u ~ Uniform(0, 1) per row (exact coverage)
            when True, or build the deterministic sets when False. LAC has no u.
        k_reg: RAPS: the number of top ranks free of penalty, an int >= 0 (None: 1).
            Only for score="raps".
        lam: RAPS: the penalty per rank beyond k_reg, a number >= 0 (None: 0.01). Only
            for score="raps".
        seed: the seed of the NumPy generator of u, an int >= 0, or None for fresh
            entropy. `fit` and `predict_sets` draw from one generator, so a new object
            with the same seed, given the same calls, returns the same sets (a restored
            config starts a new generator).

    Attributes:
        quantile: the fitted quantile Q (inf when n < 1 / alpha - 1).
        calibration_size: n.
        num_classes: K, from the fit.

    Example:
    >>> rng = np.random.default_rng(0)
    >>> probs = rng.dirichlet(np.ones(5), size=2000)             # a model that is right:
    >>> labels = np.array([rng.choice(5, p=p) for p in probs])   # labels drawn from it
    >>> conformal = tfp_bnn.conformal.SplitConformalClassifier(alpha=0.1, seed=0)
    >>> conformal = conformal.fit(labels[:1000], probs[:1000])
    >>> sets = conformal.predict_sets(probs[1000:])
    >>> sets.shape, round(tfp_bnn.conformal.set_coverage(labels[1000:], sets), 2)
    ((1000, 5), 0.9)
    """

    FITTED = _split.SplitConformal.FITTED + ("num_classes",)

    def __init__(self, alpha=0.1, score="aps", randomized=True, k_reg=None, lam=None,
                 seed=None):
        super().__init__(alpha)
        self.score = check.one_of("score", score, SCORES)
        self.randomized = check.boolean("randomized", randomized)
        for name, value in (("k_reg", k_reg), ("lam", lam)):
            if value is not None and self.score != "raps":
                raise ValueError(f"`{name}` is for score='raps', got {name}={value!r} with "
                                 f"score={self.score!r}.")
        self.k_reg = check.integer("k_reg", DEFAULT_K_REG if k_reg is None else k_reg,
                                   minimum=0) if self.score == "raps" else None
        self.lam = check.number("lam", DEFAULT_LAM if lam is None else lam,
                                low=0.0) if self.score == "raps" else None
        self.seed = check.seed(seed, allow_none=True)
        self._generator = np.random.default_rng(self.seed)
        self._num_classes = None

    @property
    def num_classes(self):
        """K, the number of classes of the fit."""
        self._fitted_quantile("num_classes")
        return self._num_classes

    def _scores(self, probs, u):
        if self.score == "lac":
            return 1.0 - probs
        if self.score == "aps":
            return class_scores(probs, u)
        return class_scores(probs, u, self.lam, self.k_reg)

    def _u(self, rows, deterministic_value):
        if self.randomized and self.score != "lac":
            return self._generator.uniform(size=rows)
        return np.full(rows, deterministic_value)

    @staticmethod
    def _unwrap(probs):
        return probs.probs if isinstance(probs, ClassificationPrediction) else probs

    def fit(self, labels, probs):
        """Calibrates on held-out rows: Q from the scores of their labels.

        Args:
            labels: calibration class ids [n] (or [n, 1]) in [0, K).
            probs: the model's probabilities at those rows [n, K], rows summing to 1,
                or a `tfp_bnn.predict.ClassificationPrediction` (its `probs`).

        Returns:
            self, fitted.
        """
        labels, probs = _check_pair(labels, self._unwrap(probs))
        num_classes = probs.shape[1]
        scores = self._scores(probs, self._u(len(labels), 1.0))
        self._calibrate(scores[np.arange(len(labels)), labels])
        self._num_classes = num_classes
        return self

    def predict_sets(self, probs):
        """The conformal prediction set of each new point, as a boolean mask.

        Args:
            probs: the model's probabilities [N, K], rows summing to 1, or a
                `tfp_bnn.predict.ClassificationPrediction`; K as in `fit`.

        Returns:
            bool [N, K]: True where class k is in row i's set (every class when Q is
            infinite).
        """
        quantile = self._fitted_quantile("predict_sets")
        probs = _check_probs(self._unwrap(probs))
        if probs.shape[1] != self._num_classes:
            raise ValueError(f"`probs` has {probs.shape[1]} classes but the classifier was "
                             f"fitted on {self._num_classes}.")
        return self._scores(probs, self._u(len(probs), 0.0)) <= quantile

    def _infinite_means(self):
        return "every set holds every class"

    def get_config(self):
        return {**super().get_config(), "score": self.score, "randomized": self.randomized,
                "k_reg": self.k_reg, "lam": self.lam, "seed": self.seed,
                "num_classes": self._num_classes}

    def _restore(self, calibration_size=None, quantile=None, num_classes=None):
        super()._restore(calibration_size, quantile)
        if self.fitted:
            self._num_classes = check.integer("num_classes", num_classes, minimum=2)
        elif num_classes is not None:
            raise ValueError(f"The config's `num_classes` ({num_classes!r}) needs a fit "
                             "(`calibration_size`).")
