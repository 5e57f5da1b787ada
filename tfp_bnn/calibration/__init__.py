"""Post-hoc calibration: maps fitted on held-out data, as Keras layers that save with the model.

Classification (after logits, or probabilities with from_logits=False):

- `TemperatureScaling`: z / T (Guo et al. 2017).
- `VectorScaling`: w * z + b, per class (Guo et al. 2017).
- `MatrixScaling`: z W + b, with Kull et al.'s (2019) off-diagonal penalty.
- `HistogramBinning`, `IsotonicCalibration`: one-vs-rest maps of each class probability
  (Zadrozny and Elkan 2001, 2002), renormalised.

Regression (after [means, log variances]):

- `VarianceScaling`: the noise variance times a fitted c^2 per output (sigma scaling).

The affine maps and variance scaling are fitted by `fit` on held-out outputs, one per row or S Monte Carlo samples per row,
minimising the negative log-likelihood of the predictive `tfp_bnn.predict` forms from them
(L-BFGS in float64), or by `fit_predictive(model, x, y)`, which samples the model first.
The binning maps are fitted on predictive probabilities (see
`tfp_bnn.calibration._one_vs_rest` for what that means inside a Bayesian network).
`calibrated(model, calibrator)` appends the fitted layer, so `tfp_bnn.predict`,
`tfp_bnn.export_predictive` and `model.save` carry the calibration.

Example:
    >>> model = keras.Sequential([keras.Input((4,)), tfp_bnn.layers.DenseFlipout(3)])
    >>> x_val = np.random.rand(50, 4).astype("float32")
    >>> y_val = np.random.randint(0, 3, size=50)
    >>> scaling = tfp_bnn.calibration.TemperatureScaling()
    >>> scaling = scaling.fit_predictive(model, x_val, y_val, num_samples=20)
    >>> calibrated = tfp_bnn.calibration.calibrated(model, scaling)
    >>> tfp_bnn.predict.classification(calibrated, x_val, num_samples=20).probs.shape
    (50, 3)
"""

from tfp_bnn.calibration.calibrated import calibrated
from tfp_bnn.calibration.histogram_binning import HistogramBinning
from tfp_bnn.calibration.isotonic_calibration import IsotonicCalibration
from tfp_bnn.calibration.matrix_scaling import MatrixScaling
from tfp_bnn.calibration.temperature_scaling import TemperatureScaling
from tfp_bnn.calibration.variance_scaling import VarianceScaling
from tfp_bnn.calibration.vector_scaling import VectorScaling

__all__ = [
    "HistogramBinning",
    "IsotonicCalibration",
    "MatrixScaling",
    "TemperatureScaling",
    "VarianceScaling",
    "VectorScaling",
    "calibrated",
]
