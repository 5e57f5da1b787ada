"""The coverage law of split conformal methods, and the check the coverage tests share.

Written from the definitions, apart from `tfp_bnn.conformal`: the rank k comes from the
decimal alpha in exact rational arithmetic, the law's moments from SciPy's beta-binomial.

For continuous scores (no ties), given its n calibration rows a method covers a new point
with probability C ~ Beta(k, n + 1 - k), k = ceil((n + 1)(1 - alpha)) = n + 1 - l with
l = floor((n + 1) alpha) (Vovk 2012). On m test points the covered count is then
Binomial(m, C), so over S independent calibration sets (seeds) the per-seed coverage
fractions are i.i.d. BetaBinomial(m, k, n + 1 - k) / m, with mean k / (n + 1).

`assert_coverage_law` checks their mean and their spread against that law:

- mean: the mean of S i.i.d. fractions has standard error sqrt(var / S). Over all S m
  test points this is the binomial standard error inflated by the shared calibration set
  of each seed's m points (var = c(1 - c)/m + (m - 1)/m Var C); the plain binomial one,
  sqrt(c(1 - c) / (S m)), ignores that sharing and would be too small.
- spread: the sample variance s^2 of S i.i.d. values has variance
  mu4 / S - var^2 (S - 3) / (S (S - 1)) (mu4: the fourth central moment); for normal
  values, mu4 = 3 var^2, this is the chi-square(S - 1) variance 2 var^2 / (S - 1), which
  the beta-binomial's kurtosis raises a little.

Each bound is 4 standard errors: a method with the right law fails with probability
about 6e-5 per bound, and the fixed seeds make each run the same.
"""

import math
from fractions import Fraction

import numpy as np
from scipy import stats

SEEDS = 2000
CALIBRATION = 100
TEST_POINTS = 100
ALPHA = 0.1
TOLERANCE_SE = 4.0


def rank(n, alpha):
    """k = ceil((n + 1)(1 - alpha)) for the decimal alpha, in exact arithmetic."""
    return math.ceil((n + 1) * (1 - Fraction(repr(alpha))))


def expected_coverage(n=CALIBRATION, alpha=ALPHA):
    """k / (n + 1): the exact coverage of a method with continuous scores."""
    return rank(n, alpha) / (n + 1)


def coverage_law(n=CALIBRATION, alpha=ALPHA, m=TEST_POINTS):
    """(mean, variance, fourth central moment) of a seed's coverage fraction on m points."""
    k = rank(n, alpha)
    law = stats.betabinom(m, k, n + 1 - k)
    support = np.arange(m + 1)
    pmf = law.pmf(support)
    fraction = support / m
    mean = float(np.sum(pmf * fraction))
    variance = float(np.sum(pmf * (fraction - mean) ** 2))
    fourth = float(np.sum(pmf * (fraction - mean) ** 4))
    return mean, variance, fourth


def coverage_errors(per_seed, n=CALIBRATION, alpha=ALPHA, m=TEST_POINTS):
    """(mean error, variance error) in standard errors of the law (see the module text)."""
    per_seed = np.asarray(per_seed, dtype=np.float64)
    seeds = per_seed.size
    mean, variance, fourth = coverage_law(n, alpha, m)
    mean_se = math.sqrt(variance / seeds)
    variance_se = math.sqrt(fourth / seeds
                            - variance ** 2 * (seeds - 3) / (seeds * (seeds - 1)))
    return ((float(per_seed.mean()) - mean) / mean_se,
            (float(per_seed.var(ddof=1)) - variance) / variance_se)


def assert_coverage_law(per_seed, n=CALIBRATION, alpha=ALPHA, m=TEST_POINTS):
    """Per-seed coverage fractions whose mean and variance match the beta-binomial law."""
    mean_error, variance_error = coverage_errors(per_seed, n, alpha, m)
    mean, variance, _ = coverage_law(n, alpha, m)
    assert abs(mean_error) <= TOLERANCE_SE, (
        f"mean coverage {np.mean(per_seed):.5f} is {mean_error:+.2f} standard errors from "
        f"the exact {mean:.5f}")
    assert abs(variance_error) <= TOLERANCE_SE, (
        f"the variance of the per-seed coverage, {np.var(per_seed, ddof=1):.3e}, is "
        f"{variance_error:+.2f} standard errors from the beta-binomial {variance:.3e}")


def covered_fraction(covered):
    """Per-seed coverage: the mean of a boolean [S, m] array over its test points."""
    return np.asarray(covered, dtype=np.float64).mean(axis=1)
