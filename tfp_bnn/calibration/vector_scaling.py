"""Vector scaling (Guo et al. 2017, sec. 4.2): a per-class scale and bias of the logits.

z'_k = w_k z_k + b_k, fitted on held-out data by minimising the NLL; 2K parameters. Unlike
temperature scaling it may change the predicted class.
"""

import keras
import numpy as np

from tfp_bnn.calibration._logit_calibration import LogitCalibration


@keras.saving.register_keras_serializable(package="tfp_bnn")
class VectorScaling(LogitCalibration):
    """Scales and shifts each class's logit: z'_k = w_k z_k + b_k.

    Args:
        from_logits: True (default) if the layer receives logits (or log-probabilities);
            False for probabilities, whose logs it maps.
        **kwargs: base layer arguments (name, dtype, ...).

    Call arguments:
        inputs: a classifier's outputs [..., K].

    Returns:
        Calibrated logits [..., K].

    Example:
    >>> rng = np.random.default_rng(0)
    >>> logits = 3.0 * rng.normal(size=(500, 4))
    >>> labels = rng.integers(0, 4, size=500)
    >>> layer = tfp_bnn.calibration.VectorScaling().fit(logits, labels)
    >>> layer.fit_result["nll_after"] < layer.fit_result["nll_before"]
    True
    """

    def _create_weights(self, num_classes):
        self._num_classes = num_classes
        self.scale = self.add_weight(name="scale", shape=(num_classes,), initializer="ones",
                                     trainable=False)
        self.bias = self.add_weight(name="bias", shape=(num_classes,), initializer="zeros",
                                    trainable=False)

    def _call_map(self, z):
        return z * keras.ops.cast(self.scale, z.dtype) + keras.ops.cast(self.bias, z.dtype)

    def _num_parameters(self, num_classes):
        return 2 * num_classes

    def _initial(self, num_classes):
        return np.concatenate([np.ones(num_classes), np.zeros(num_classes)])

    def _map(self, z, theta):
        k = z.shape[-1]
        return z * theta[:k] + theta[k:]

    def _pullback(self, z, mapped, gradient, theta):
        return np.concatenate([np.sum(gradient * z, axis=(0, 1)), np.sum(gradient, axis=(0, 1))])

    def _assign(self, theta):
        k = self._num_classes
        self.scale.assign(theta[:k])
        self.bias.assign(theta[k:])
