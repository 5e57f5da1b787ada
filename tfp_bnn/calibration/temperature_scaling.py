"""Temperature scaling (Guo et al. 2017, "On calibration of modern neural networks", sec. 4.2).

One scalar T > 0 divides every logit: softmax(z / T) keeps the predicted class and changes
only the confidence. T is fitted on held-out data by minimising the NLL; the layer holds
log T, so T stays positive without a constraint.
"""

import keras
import numpy as np

from tfp_bnn.calibration._logit_calibration import LogitCalibration


@keras.saving.register_keras_serializable(package="tfp_bnn")
class TemperatureScaling(LogitCalibration):
    """Divides logits by a fitted temperature T: z' = z / T.

    Args:
        from_logits: True (default) if the layer receives logits (or log-probabilities);
            False for probabilities (a softmax output), whose logs it scales.
        **kwargs: base layer arguments (name, dtype, ...).

    Call arguments:
        inputs: a classifier's outputs [..., K].

    Returns:
        Calibrated logits [..., K].

    Example:
    >>> held_out_logits = 3.0 * np.random.default_rng(0).normal(size=(500, 4))
    >>> labels = np.random.default_rng(1).integers(0, 4, size=500)   # logits say nothing
    >>> layer = tfp_bnn.calibration.TemperatureScaling().fit(held_out_logits, labels)
    >>> layer.temperature > 3.0    # overconfident logits are cooled
    True
    """

    def _create_weights(self, num_classes):
        self._num_classes = num_classes
        self.log_temperature = self.add_weight(name="log_temperature", shape=(),
                                               initializer="zeros", trainable=False)

    @property
    def temperature(self):
        """T, a Python float."""
        return float(np.exp(keras.ops.convert_to_numpy(self.log_temperature)))

    def _call_map(self, z):
        return z * keras.ops.exp(-keras.ops.cast(self.log_temperature, z.dtype))

    def _num_parameters(self, num_classes):
        return 1

    def _initial(self, num_classes):
        return np.zeros(1)

    def _map(self, z, theta):
        return z * np.exp(-theta[0])

    def _pullback(self, z, mapped, gradient, theta):
        return np.array([-np.sum(gradient * mapped)])  # d(z e^-theta)/dtheta = -z'

    def _assign(self, theta):
        self.log_temperature.assign(float(theta[0]))
