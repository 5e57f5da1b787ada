"""Split conformal prediction: intervals and sets with finite-sample coverage guarantees.

A model's predictions on n held-out calibration rows (not used in training) give one
score per row; their conformal quantile Q, the ceil((n + 1)(1 - alpha))-th smallest
score (`conformal_quantile`), turns each new prediction into an interval or a set:

- `SplitConformalRegressor`: mu -/+ Q with the score |y - mu| ("absolute"; Papadopoulos
  et al. 2002, Lei et al. 2018), or mu -/+ Q sigma with |y - mu| / sigma ("normalized";
  Papadopoulos, Gammerman and Vovk 2008, Lei et al. 2018), sigma the predictive sd, e.g.
  of a `tfp_bnn.predict.RegressionPrediction`.
- `ConformalizedQuantileRegressor`: [q_lo - Q, q_hi + Q] with the score
  max(q_lo - y, y - q_hi) (CQR, Romano, Patterson and Candes 2019), e.g. around a
  Bayesian predictive's central interval.
- `SplitConformalClassifier`: the classes whose score is at most Q, with the score 1 - p_y
  ("lac", Sadinle, Lei and Wasserman 2019), the sorted mass up to the label ("aps", Romano,
  Sesia and Candes 2020) or APS plus a rank penalty ("raps", Angelopoulos, Bates, Malik and
  Jordan 2021).

The guarantee (Vovk, Gammerman and Shafer 2005; Lei et al. 2018): for a test
point exchangeable with the calibration rows,

    1 - alpha <= P(y in C(x)) <= 1 - alpha + 1 / (n + 1),

the upper bound for continuous scores without ties (the randomized APS and RAPS scores
are continuous by construction). The probability is marginal, over the calibration set
and the test point; it says nothing per x. Given the calibration set the coverage
follows Beta(k, n + 1 - k), k = ceil((n + 1)(1 - alpha)). With n < 1 / alpha - 1
calibration rows (`minimum_calibration_size`) Q is infinite: every interval is the whole
line and every set holds every class, and `fit` warns.

The metrics `coverage`, `mean_width`, `set_coverage`, `mean_set_size` and
`size_stratified_coverage` score intervals and sets on test data. The fitted objects are
plain Python objects, registered for `keras.saving.serialize_keras_object`; their config
is plain JSON (the arguments and the fitted quantile).

Example:
>>> rng = np.random.default_rng(0)
>>> x = rng.uniform(-2, 2, size=3000)
>>> sd = 0.2 + 0.5 * np.abs(x)                       # the model's predictive sd
>>> y = np.sin(x) + sd * rng.normal(size=3000)
>>> conformal = tfp_bnn.conformal.SplitConformalRegressor(alpha=0.1, score="normalized")
>>> conformal = conformal.fit(y[:1000], np.sin(x[:1000]), sd[:1000])
>>> lower, upper = conformal.predict_interval(np.sin(x[1000:]), sd[1000:])
>>> round(tfp_bnn.conformal.coverage(y[1000:], lower, upper), 2)   # 0.9 on average
0.91
"""

from tfp_bnn.conformal._split import conformal_quantile
from tfp_bnn.conformal._split import minimum_calibration_size
from tfp_bnn.conformal.classification import SplitConformalClassifier
from tfp_bnn.conformal.metrics import SizeStratifiedCoverage
from tfp_bnn.conformal.metrics import coverage
from tfp_bnn.conformal.metrics import mean_set_size
from tfp_bnn.conformal.metrics import mean_width
from tfp_bnn.conformal.metrics import set_coverage
from tfp_bnn.conformal.metrics import size_stratified_coverage
from tfp_bnn.conformal.quantile_regression import ConformalizedQuantileRegressor
from tfp_bnn.conformal.regression import SplitConformalRegressor

__all__ = [
    "ConformalizedQuantileRegressor",
    "SizeStratifiedCoverage",
    "SplitConformalClassifier",
    "SplitConformalRegressor",
    "conformal_quantile",
    "coverage",
    "mean_set_size",
    "mean_width",
    "minimum_calibration_size",
    "set_coverage",
    "size_stratified_coverage",
]
