"""Matrix scaling (Guo et al. 2017, sec. 4.2), with the off-diagonal penalty of Kull et al.
(2019, "Beyond temperature scaling: obtaining well-calibrated multiclass probabilities with
Dirichlet calibration", ODIR).

z' = z W + b with a full K x K matrix, fitted on held-out data by minimising

    NLL + l2 * (sum_{j != k} W_jk^2 + sum_k b_k^2) / (K (K - 1))

(l2 = 0, the default, is plain matrix scaling). K^2 + K parameters: with many classes and
few held-out rows it overfits without the penalty. Applied to log-probabilities
(from_logits=False) it is Dirichlet calibration's linear form.
"""

import keras
import numpy as np

from tfp_bnn import _validation as check
from tfp_bnn.calibration._logit_calibration import LogitCalibration


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MatrixScaling(LogitCalibration):
    """Maps logits through a fitted matrix and bias: z' = z W + b.

    Args:
        l2: >= 0, the off-diagonal and bias penalty (ODIR) of the fit.
        from_logits: True (default) if the layer receives logits (or log-probabilities);
            False for probabilities, whose logs it maps.
        **kwargs: base layer arguments (name, dtype, ...).

    Call arguments:
        inputs: a classifier's outputs [..., K].

    Returns:
        Calibrated logits [..., K].

    Example:
    >>> rng = np.random.default_rng(0)
    >>> logits = rng.normal(size=(500, 3))
    >>> labels = np.argmax(logits[:, [1, 2, 0]], axis=1)    # the classes are rotated
    >>> layer = tfp_bnn.calibration.MatrixScaling(l2=0.1).fit(logits, labels)
    >>> bool(np.mean(np.argmax(layer(logits.astype("float32")), axis=1) == labels) > 0.9)
    True
    """

    def __init__(self, l2=0.0, from_logits=True, **kwargs):
        super().__init__(from_logits=from_logits, **kwargs)
        self.l2 = check.number("l2", l2, low=0.0)

    def get_config(self):
        return {**super().get_config(), "l2": self.l2}

    def _create_weights(self, num_classes):
        self._num_classes = num_classes
        self.kernel = self.add_weight(name="kernel", shape=(num_classes, num_classes),
                                      initializer="identity", trainable=False)
        self.bias = self.add_weight(name="bias", shape=(num_classes,), initializer="zeros",
                                    trainable=False)

    def _call_map(self, z):
        return keras.ops.matmul(z, keras.ops.cast(self.kernel, z.dtype)) \
            + keras.ops.cast(self.bias, z.dtype)

    def _num_parameters(self, num_classes):
        return num_classes * num_classes + num_classes

    def _initial(self, num_classes):
        return np.concatenate([np.eye(num_classes).ravel(), np.zeros(num_classes)])

    def _split(self, theta):
        k = self._num_classes
        return theta[:k * k].reshape(k, k), theta[k * k:]

    def _map(self, z, theta):
        kernel, bias = self._split(theta)
        return z @ kernel + bias

    def _pullback(self, z, mapped, gradient, theta):
        kernel_gradient = np.einsum("snj,snk->jk", z, gradient)
        return np.concatenate([kernel_gradient.ravel(), np.sum(gradient, axis=(0, 1))])

    def _penalty(self, theta):
        if self.l2 == 0.0:
            return 0.0, np.zeros_like(theta)
        k = self._num_classes
        kernel, bias = self._split(theta)
        off = kernel * (1.0 - np.eye(k))
        weight = self.l2 / (k * (k - 1))
        value = float(weight * (np.sum(off ** 2) + np.sum(bias ** 2)))
        return value, 2.0 * weight * np.concatenate([off.ravel(), bias])

    def _assign(self, theta):
        kernel, bias = self._split(theta)
        self.kernel.assign(kernel)
        self.bias.assign(bias)
