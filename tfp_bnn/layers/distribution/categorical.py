"""Categorical output distribution over integer class labels."""

import keras

from tfp_bnn import _validation
from tfp_bnn._substrate import tfd
from tfp_bnn.layers.distribution.distribution_lambda import EventShapeDistribution
from tfp_bnn.layers.distribution.distribution_lambda import ParamsSize
from tfp_bnn.layers.distribution.distribution_lambda import convert_to_tensor_name


@keras.saving.register_keras_serializable(package="tfp_bnn")
class Categorical(EventShapeDistribution):
    """Integer class labels, with logits from the input.

    TFP has no layer for it (its `OneHotCategorical` wants one-hot targets);
    this one takes the integer labels Keras users train with
    (`SparseCategoricalCrossentropy`'s targets). The sampled label is
    returned as a float in the layer's dtype, so Keras passes the output to
    the loss unchanged; `log_prob` accepts integer or float labels.

    Args:
        num_classes: K >= 2.
        convert_to_tensor_fn: "sample" (default, as TFP), "mode" (the most
            probable class) or a registered callable; a Categorical has no
            mean.
        validate_args: passed to `tfd.Categorical`.
        **kwargs: `seed` (int or None, seeds convert_to_tensor_fn="sample")
            and base layer keyword arguments, passed to `DistributionLambda`.

    Call arguments:
        inputs: tensor [..., K] of logits.

    Returns:
        Tensor [...] of class labels carrying `tfd.Categorical`.

    Example:
    >>> model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), Categorical(3)])
    >>> model.compile("adam", loss=tfp_bnn.losses.NegativeLogLikelihood())  # y: int labels
    >>> labels = model(np.zeros((2, 4), "float32"))   # sampled class labels
    >>> labels.shape, tfp_bnn.distributions.distribution_of(labels).probs_parameter().shape
    (TensorShape([2]), TensorShape([2, 3]))
    """

    def __init__(self, num_classes, convert_to_tensor_fn="sample", validate_args=False,
                 **kwargs):
        kwargs.pop("event_shape", None)
        size = _validation.size("num_classes", num_classes)
        if size < 2:
            raise ValueError(f"`num_classes` must be >= 2, got {num_classes!r}.")
        if convert_to_tensor_name(convert_to_tensor_fn) == "mean":
            raise ValueError("A Categorical has no mean: use convert_to_tensor_fn='mode' or "
                             "'sample'.")
        self.num_classes = size
        super().__init__((), convert_to_tensor_fn, validate_args, **kwargs)

    @staticmethod
    def params_size(num_classes):
        """The number of logits: `num_classes`.

        Args:
            num_classes: K >= 2.

        Returns:
            K, an int.
        """
        size = _validation.size("num_classes", num_classes)
        return ParamsSize(size)

    def _params_size_arguments(self):
        return (self.num_classes,)

    @staticmethod
    def new(params, event_shape=(), validate_args=False):
        params = keras.ops.convert_to_tensor(params)
        return tfd.Categorical(logits=params, dtype=params.dtype, validate_args=validate_args)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1])

    def get_config(self):
        config = super().get_config()
        config.pop("event_shape")
        config["num_classes"] = self.num_classes
        return config
