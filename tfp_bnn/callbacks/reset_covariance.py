"""Callback that restarts the GP layers' precision matrices at every epoch (SNGP)."""

import keras

from tfp_bnn import _keras_internals
from tfp_bnn.layers.gaussian_process.random_feature_gaussian_process import RandomFeatureGaussianProcess


def gp_layers(model):
    """The `RandomFeatureGaussianProcess` layers of `model`, nested models included."""
    return [layer for layer in _keras_internals.flatten_layers(model, include_self=True)
            if isinstance(layer, RandomFeatureGaussianProcess)]


@keras.saving.register_keras_serializable(package="tfp_bnn")
class ResetCovariance(keras.callbacks.Callback):
    """Sets every `RandomFeatureGaussianProcess` back to P = ridge I when an epoch begins.

    The GP layer adds each training batch's Phi^T W Phi to its precision matrix P
    (`momentum=None`). The hidden layers move while the network trains, so the
    features of earlier epochs describe another network: restarted at every epoch, P
    holds the last epoch's examples once each, the exact Laplace precision
    (Liu et al. 2020, sec. 3.2 and Algorithm 1) for the weights the last epoch ended
    near. Layers with a `momentum` are reset too (their moving average restarts).

    Raises:
        ValueError: when training starts on a model without such a layer (the callback
            would silently do nothing).

    Example:
    >>> x = np.random.rand(16, 4).astype("float32")
    >>> y = (x[:, 0] > 0.5).astype("int32")
    >>> model = keras.Sequential([
    ...     keras.Input((4,)),
    ...     tfp_bnn.layers.RandomFeatureGaussianProcess(2, num_inducing=32)])
    >>> model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    >>> history = model.fit(x, y, epochs=2, verbose=0,
    ...                     callbacks=[tfp_bnn.callbacks.ResetCovariance()])
    """

    def on_train_begin(self, logs=None):
        if not gp_layers(self.model):
            raise ValueError("ResetCovariance: the model has no "
                             "tfp_bnn.layers.RandomFeatureGaussianProcess layer to reset.")

    def on_epoch_begin(self, epoch, logs=None):
        for layer in gp_layers(self.model):
            layer.reset_covariance()

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)
