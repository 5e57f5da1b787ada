"""Multivariate Normal output with a full covariance (TFP's `MultivariateNormalTriL`)."""

import keras
import numpy as np
from tfp_bnn._tf import tf

from tfp_bnn import _validation
from tfp_bnn._substrate import tfb
from tfp_bnn._substrate import tfd
from tfp_bnn.layers.distribution.distribution_lambda import EventSizeDistribution
from tfp_bnn.layers.distribution.distribution_lambda import ParamsSize


@keras.saving.register_keras_serializable(package="tfp_bnn")
class MultivariateNormalTriL(EventSizeDistribution):
    """Correlated real outputs: a Normal with a learned Cholesky factor per input.

    Keras 3 counterpart of `tfp.layers.MultivariateNormalTriL`: the input's
    last axis holds d locations and d(d+1)/2 entries of the scale's lower
    triangle, filled by `tfb.FillScaleTriL` (softplus diagonal + 1e-5), as
    in TFP.

    Args:
        event_size: d, the number of outputs.
        convert_to_tensor_fn: "sample" (TFP's default), "mean", "mode" or a
            registered callable: the value the output tensor holds (see
            `DistributionLambda`).
        validate_args: passed to the TFP distributions.
        **kwargs: `seed` (int or None, seeds convert_to_tensor_fn="sample")
            and base layer keyword arguments, passed to `DistributionLambda`.

    Call arguments:
        inputs: tensor [..., d + d(d+1)/2].

    Returns:
        Tensor [..., d] carrying `tfd.MultivariateNormalTriL`.

    Example:
    >>> head = MultivariateNormalTriL(3)   # after Dense(MultivariateNormalTriL.params_size(3))
    >>> MultivariateNormalTriL.params_size(3)   # 3 means, 6 entries of the Cholesky factor
    9
    >>> head(np.zeros((2, 9), "float32")).covariance().shape
    TensorShape([2, 3, 3])
    """

    @staticmethod
    def params_size(event_size):
        size = _validation.size("event_size", event_size)
        return ParamsSize(size + size * (size + 1) // 2)

    @staticmethod
    def new(params, event_size, validate_args=False):
        size = _validation.size("event_size", event_size)
        params = keras.ops.convert_to_tensor(params)
        # A NumPy dtype on either backend (tf.as_dtype reads JAX's, bfloat16 included).
        fill = tfb.FillScaleTriL(diag_shift=np.array(1e-5, tf.as_dtype(params.dtype).as_numpy_dtype),
                                 validate_args=validate_args)
        return tfd.MultivariateNormalTriL(loc=params[..., :size],
                                          scale_tril=fill(params[..., size:]),
                                          validate_args=validate_args)
