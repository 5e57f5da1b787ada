"""The split-conformal step every method shares: the quantile of n calibration scores.

With n calibration scores s_1..s_n and a test score s exchangeable with them, the rank

    k = ceil((n + 1)(1 - alpha))

and the k-th smallest score Q (the "higher" empirical quantile at level k / n) give

    P(s <= Q) >= 1 - alpha,

and P(s <= Q) = k / (n + 1) <= 1 - alpha + 1 / (n + 1) when the scores are continuous (no
ties). Conditionally on the calibration set, P(s <= Q | calibration) follows
Beta(k, n + 1 - k) (Vovk 2012; Angelopoulos and Bates 2023). When k > n, that
is when n < 1 / alpha - 1, no finite Q is valid and Q = inf: every interval is the whole
line and every set holds every class.

`SplitConformal` is the shallow base of the fitted objects of `tfp_bnn.conformal`: alpha,
the fitted quantile, the not-fitted error, the warning of an infinite quantile and the
config (plain JSON: the constructor's arguments, the calibration size and the quantile).

Example:
>>> conformal_quantile([0.3, 0.1, 0.4, 0.2], alpha=0.2)   # k = ceil(5 * 0.8) = 4: the largest
0.4
>>> conformal_quantile([0.3, 0.1, 0.4, 0.2], alpha=0.1)   # k = ceil(4.5) = 5 > n = 4
inf
>>> minimum_calibration_size(0.1)
9
"""

import math
import warnings

import numpy as np

from tfp_bnn import _validation as check

# (n + 1) alpha within this relative distance of an integer counts as that integer: alpha
# arrives as a decimal (0.3 is stored as 0.29999999999999998), and the product of 10 and
# that double would otherwise floor to 2, one rank more than the decimal asks for. One
# float multiplication errs by ~1e-16 relative; 1e-12 leaves room and moves no real rank.
_INTEGER_TOLERANCE = 1e-12


def check_alpha(alpha) -> float:
    """`alpha` as a float in (0, 1), or ValueError naming it."""
    return check.number("alpha", alpha, 0.0, 1.0, low_open=True, high_open=True)


def conformal_rank(n: int, alpha: float) -> int:
    """k = ceil((n + 1)(1 - alpha)) = n + 1 - floor((n + 1) alpha): the rank of Q.

    Args:
        n: the number of calibration scores, an int >= 1.
        alpha: the miscoverage level, in (0, 1).

    Returns:
        The rank k, an int in 1..n + 1 (n + 1 means Q = inf).

    Example:
    >>> conformal_rank(100, 0.1), conformal_rank(9, 0.3), conformal_rank(5, 0.1)
    (91, 7, 6)
    """
    n = check.integer("n", n)
    alpha = check_alpha(alpha)
    product = (n + 1) * alpha
    nearest = round(product)
    if abs(product - nearest) <= _INTEGER_TOLERANCE * max(1.0, product):
        return n + 1 - nearest
    return n + 1 - math.floor(product)


def minimum_calibration_size(alpha: float) -> int:
    """The smallest n whose conformal quantile is finite: ceil(1 / alpha) - 1.

    Below it, ceil((n + 1)(1 - alpha)) > n and every interval is infinite.

    Args:
        alpha: the miscoverage level, in (0, 1).

    Returns:
        An int >= 1.

    Example:
    >>> minimum_calibration_size(0.1), minimum_calibration_size(0.05), minimum_calibration_size(0.3)
    (9, 19, 3)
    """
    alpha = check_alpha(alpha)
    n = max(1, math.floor(1.0 / alpha) - 2)  # at or just below the answer
    while conformal_rank(n, alpha) > n:
        n += 1
    return n


def conformal_quantile(scores, alpha: float) -> float:
    """The split-conformal quantile Q of calibration scores: their k-th smallest value.

    k = ceil((n + 1)(1 - alpha)) for n scores (`conformal_rank`); Q = inf when k > n.
    A test score exchangeable with the n scores is <= Q with probability >= 1 - alpha, and
    at most 1 - alpha + 1 / (n + 1) when the scores have no ties.

    Args:
        scores: the n calibration scores (any conformity score), 1-D, finite.
        alpha: the miscoverage level, in (0, 1).

    Returns:
        Q, a float (inf when n < 1 / alpha - 1).

    Example:
    >>> conformal_quantile(np.arange(1.0, 101.0), alpha=0.1)   # k = ceil(101 * 0.9) = 91
    91.0
    """
    scores = check.vector("scores", scores)
    rank = conformal_rank(scores.size, alpha)
    if rank > scores.size:
        return math.inf
    return float(np.partition(scores, rank - 1)[rank - 1])


def matching_rows(**arrays):
    """Raises a ValueError naming the arrays (keyword order) whose lengths differ."""
    (first, values), *others = arrays.items()
    for name, other in others:
        if len(other) != len(values):
            raise ValueError(f"`{name}` has {len(other)} rows but `{first}` has "
                             f"{len(values)}; they must describe the same points.")


class SplitConformal:
    """Base of the fitted split-conformal objects: alpha, the quantile, the config.

    A subclass computes its calibration scores in `fit` and hands them to `_calibrate`;
    its other methods call `_fitted_quantile()` first. Subclasses with more fitted state
    than the quantile extend `FITTED` and `_restore`.

    Args:
        alpha: the miscoverage level, in (0, 1).
    """

    # The config keys that hold fitted state rather than constructor arguments.
    FITTED = ("calibration_size", "quantile")

    def __init__(self, alpha=0.1):
        self.alpha = check_alpha(alpha)
        self._calibration_size = None
        self._quantile = None

    @property
    def fitted(self):
        """Whether `fit` (or a config with a fitted quantile) has set the quantile."""
        return self._quantile is not None

    @property
    def quantile(self):
        """The fitted conformal quantile Q, a float (inf when n < 1 / alpha - 1)."""
        return self._fitted_quantile("quantile")

    @property
    def calibration_size(self):
        """n, the number of calibration rows of the fit."""
        self._fitted_quantile("calibration_size")
        return self._calibration_size

    def _fitted_quantile(self, what):
        if self._quantile is None:
            raise ValueError(f"This {type(self).__name__} is not fitted: call fit() before "
                             f"{what}.")
        return self._quantile

    def _calibrate(self, scores):
        """Sets the quantile of the n calibration `scores`; warns when it is infinite."""
        quantile = conformal_quantile(scores, self.alpha)
        if math.isinf(quantile):
            warnings.warn(
                f"{type(self).__name__}: with n = {len(scores)} calibration rows and alpha = "
                f"{self.alpha:g}, ceil((n + 1)(1 - alpha)) > n and the conformal quantile is "
                f"infinite: {self._infinite_means()}. Calibrate on at least "
                f"{minimum_calibration_size(self.alpha)} rows.", UserWarning, stacklevel=3)
        self._calibration_size = len(scores)
        self._quantile = quantile

    def _infinite_means(self):
        return "every interval is (-inf, inf)"

    def get_config(self):
        """The constructor's arguments and the fitted state, as plain JSON values.

        `calibration_size` and `quantile` are None before `fit`; an infinite quantile is
        stored as None beside its calibration size (strict JSON has no infinity), which
        the rank ceil((n + 1)(1 - alpha)) > n tells apart.
        """
        finite = self._quantile is not None and math.isfinite(self._quantile)
        return {"alpha": self.alpha, "calibration_size": self._calibration_size,
                "quantile": float(self._quantile) if finite else None}

    @classmethod
    def from_config(cls, config):
        """The object `get_config` describes, fitted if the config holds a fit."""
        config = dict(config)
        fitted = {key: config.pop(key, None) for key in cls.FITTED}
        result = cls(**config)
        result._restore(**fitted)
        return result

    def _restore(self, calibration_size=None, quantile=None):
        if calibration_size is None:
            if quantile is not None:
                raise ValueError(f"The config's `quantile` ({quantile!r}) needs its "
                                 "`calibration_size`.")
            return
        calibration_size = check.integer("calibration_size", calibration_size)
        infinite = conformal_rank(calibration_size, self.alpha) > calibration_size
        if infinite:
            if quantile is not None:
                raise ValueError(f"The config's `quantile` must be None (infinite) for "
                                 f"calibration_size = {calibration_size} at alpha = "
                                 f"{self.alpha:g}, got {quantile!r}.")
            quantile = math.inf
        else:
            quantile = check.number("quantile", quantile)
        self._calibration_size, self._quantile = calibration_size, quantile

    def __repr__(self):
        config = self.get_config()
        arguments = ", ".join(f"{key}={value!r}" for key, value in config.items()
                              if key not in self.FITTED)
        state = (f"quantile={self._quantile:.6g}, calibration_size={self._calibration_size}"
                 if self.fitted else "not fitted")
        return f"{type(self).__name__}({arguments}; {state})"
