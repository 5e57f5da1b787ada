"""RegressionPrediction: the eq. 67 decomposition, eq. 49 log-likelihood, intervals,
coverage and rescaling of a mixture of T Gaussians per point and output.
"""

import math
from statistics import NormalDist

import numpy as np
import pytest

from tfp_bnn.predict import RegressionPrediction

pytestmark = pytest.mark.jax


def test_decomposition_by_hand():
    # Two samples, one point: means 1 and 3, variances 0.5 and 1.5.
    pred = RegressionPrediction([[1.0], [3.0]], [[0.5], [1.5]])
    assert pred.mean[0] == 2.0
    assert pred.epistemic_variance[0] == 1.0  # ((1-2)^2 + (3-2)^2) / 2
    assert pred.aleatoric_variance[0] == 1.0  # (0.5 + 1.5) / 2
    assert pred.total_variance[0] == 2.0
    assert pred.stddev[0] == math.sqrt(2.0)


def test_log_likelihood_is_log_mean_exp_of_densities():
    pred = RegressionPrediction([[1.0], [3.0]], [[0.5], [1.5]])
    y = 2.5
    densities = [math.exp(-((y - m) ** 2) / (2 * v)) / math.sqrt(2 * math.pi * v)
                 for m, v in ((1.0, 0.5), (3.0, 1.5))]
    assert pred.log_likelihood([y])[0] == pytest.approx(math.log(sum(densities) / 2), rel=1e-12)


def test_log_likelihood_stays_finite_for_extreme_log_variances():
    # s = +-50 as a heteroscedastic head may output: densities far below float64's
    # smallest number one by one still give a finite log-mean-exp.
    means = np.array([[0.0], [0.0]])
    pred = RegressionPrediction(means, np.exp(np.array([[-50.0], [50.0]])))
    values = pred.log_likelihood([1e3])
    assert np.all(np.isfinite(values))
    lower, upper = pred.interval(0.9)
    assert np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))


def test_single_gaussian_interval_and_coverage():
    pred = RegressionPrediction([[[0.0, 10.0]]], [[[4.0, 1.0]]])
    lower, upper = pred.interval(0.95)
    z = NormalDist().inv_cdf(0.975)
    np.testing.assert_allclose(lower, [[-2 * z, 10 - z]], rtol=1e-9)
    np.testing.assert_allclose(upper, [[2 * z, 10 + z]], rtol=1e-9)
    np.testing.assert_allclose(pred.z_interval(0.95)[0], lower, rtol=1e-9)
    # Intervals: [-3.92, 3.92] and [8.04, 11.96].
    assert pred.coverage([[3.0, 10.5]], 0.95) == 1.0
    assert pred.coverage([[5.0, 10.5]], 0.95) == 0.5
    assert pred.coverage([[5.0, 12.5]], 0.95) == 0.0


def test_mixture_interval_matches_mixture_cdf():
    means = np.array([[-1.0], [2.0], [2.5]])
    variances = np.array([[0.25], [1.0], [0.04]])
    pred = RegressionPrediction(means, variances)
    lower, upper = pred.interval(0.8)

    def cdf(q):
        return np.mean([NormalDist(m, math.sqrt(v)).cdf(q)
                        for m, v in zip(means[:, 0], variances[:, 0])])

    assert cdf(float(lower[0])) == pytest.approx(0.1, abs=1e-9)
    assert cdf(float(upper[0])) == pytest.approx(0.9, abs=1e-9)


def test_interval_without_noise_uses_sample_quantiles():
    means = np.arange(101, dtype=float)[:, None]
    pred = RegressionPrediction(means)
    lower, upper = pred.interval(0.9)
    assert lower[0] == pytest.approx(5.0) and upper[0] == pytest.approx(95.0)
    with pytest.raises(ValueError, match="zero noise variance"):
        pred.log_likelihood([1.0])


def test_rescale_maps_to_data_units():
    pred = RegressionPrediction([[1.0], [3.0]], [[0.5], [1.5]])
    scaled = pred.rescale(shift=10.0, scale=2.0)
    assert scaled.mean[0] == 14.0 and scaled.total_variance[0] == 8.0
    # A density in data units is the standardised one divided by the scale.
    assert scaled.log_likelihood([15.0])[0] == pytest.approx(
        pred.log_likelihood([2.5])[0] - math.log(2.0), rel=1e-12)
    assert scaled.rmse([16.0]) == pytest.approx(2 * pred.rmse([3.0]))


def _mixture(num_samples, count, seed=0):
    rng = np.random.default_rng(seed)
    means = rng.normal(size=(num_samples, count, 1))
    variances = rng.uniform(0.1, 2.0, size=(num_samples, count, 1))
    return means, variances


def test_coverage_from_the_cdf_equals_coverage_from_the_interval():
    means, variances = _mixture(300, 40)
    pred = RegressionPrediction(means, variances)
    lower, upper = pred.interval(0.9)
    # Targets just inside and just outside both bounds, and spread ones.
    y = np.concatenate([lower[:10] + 1e-9, lower[10:20] - 1e-9, upper[20:30] - 1e-9,
                        np.linspace(-3, 3, 10)[:, None]])
    inside = (y >= lower) & (y <= upper)
    assert inside[:30].ravel().tolist() == [True] * 10 + [False] * 10 + [True] * 10
    assert pred.coverage(y, 0.9) == np.mean(inside)


def test_scoring_temporaries_do_not_grow_with_the_samples(monkeypatch):
    """The per-sample math runs over chunks: `python -m zoo evaluate --samples 1000000`
    on 31 rows held 3.4 GB and ran 120 CDF passes over all T * N values for coverage."""
    import tracemalloc  # noqa: PLC0415 - this test only

    from tfp_bnn.predict import regression_prediction  # noqa: PLC0415

    monkeypatch.setattr(regression_prediction, "CHUNK_VALUES", 2**14, raising=False)
    means, variances = _mixture(20_000, 31)  # 620,000 values: 5 MB per array
    y = np.zeros((31, 1))
    tracemalloc.start()
    try:
        pred = RegressionPrediction(means, variances)
        pred.log_likelihood(y)
        pred.coverage(y)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # A chunk's temporaries are 2**14 float64 (128 KiB) each; a [T, N] one is 5 MB.
    assert peak < means.nbytes / 4, peak


def test_cdf_is_the_gaussian_mixture_cdf():
    from scipy import stats
    rng = np.random.default_rng(4)
    means, variances = rng.normal(size=(5, 7, 2)), rng.uniform(0.2, 2.0, size=(5, 7, 2))
    prediction = RegressionPrediction(means, variances)
    y = rng.normal(size=(7, 2))
    expected = stats.norm.cdf(y, means, np.sqrt(variances)).mean(axis=0)
    np.testing.assert_allclose(prediction.cdf(y), expected, rtol=1e-12, atol=1e-15)
    with pytest.raises(ValueError, match="`y`"):
        prediction.cdf(np.zeros(3))
