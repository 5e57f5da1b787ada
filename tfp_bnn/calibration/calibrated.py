"""`calibrated(model, calibrator)`: a trained model with a fitted calibrator appended.

The result is one Keras model: `tfp_bnn.predict` samples it as it samples the model (each
Monte Carlo sample's outputs pass through the calibrator), `tfp_bnn.export_predictive`
serves the calibrated predictive, and `model.save` keeps the calibrator's fitted weights.
"""

import keras

from tfp_bnn.calibration._logit_calibration import LogitCalibration
from tfp_bnn.calibration._one_vs_rest import OneVsRestCalibration
from tfp_bnn.calibration.variance_scaling import VarianceScaling


def calibrated(model, calibrator, name=None):
    """The model followed by `calibrator` (a fitted `tfp_bnn.calibration` layer).

    A functional or sequential model is extended on its own graph (its inputs, its layers,
    then the calibrator); any other model is wrapped in a `keras.Sequential`.

    Args:
        model: a built Keras model whose (single) output the calibrator takes.
        calibrator: `TemperatureScaling`, `VectorScaling`, `MatrixScaling`,
            `HistogramBinning`, `IsotonicCalibration` (after logits or probabilities) or
            `VarianceScaling` (after [means, log variances]).
        name: the new model's name (default: the model's, + "_calibrated").

    Returns:
        A `keras.Model` sharing the model's layers and weights.

    Example:
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
    >>> x_val = np.random.rand(40, 4).astype("float32")
    >>> y_val = np.random.randint(0, 3, size=40)
    >>> scaling = tfp_bnn.calibration.TemperatureScaling().fit(model.predict(x_val, verbose=0),
    ...                                                        y_val)
    >>> tfp_bnn.calibration.calibrated(model, scaling).output.shape
    (None, 3)
    """
    if not isinstance(model, keras.Model) or not model.built:
        raise ValueError(f"`model` must be a built keras.Model, got {type(model).__name__}.")
    kinds = (LogitCalibration, OneVsRestCalibration, VarianceScaling)
    if not isinstance(calibrator, kinds):
        raise ValueError("`calibrator` must be a tfp_bnn.calibration layer, got "
                         f"{type(calibrator).__name__}.")
    if calibrator.built is False:
        raise ValueError(f"`calibrator` ({type(calibrator).__name__}) is not fitted: call its "
                         "fit or fit_predictive first.")
    name = name or f"{model.name}_calibrated"
    try:
        inputs, outputs = model.inputs, model.outputs
    except (AttributeError, ValueError):
        inputs = outputs = None
    if inputs and outputs:
        if len(outputs) != 1:
            raise ValueError(f"`model` has {len(outputs)} outputs; a calibrator takes one.")
        single = inputs[0] if len(inputs) == 1 else inputs
        return keras.Model(single, calibrator(outputs[0]), name=name)
    return keras.Sequential([model, calibrator], name=name)
