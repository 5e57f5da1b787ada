"""A KL penalty on a distribution layer's output: TFP's `KLDivergenceRegularizer`
and `KLDivergenceAddLoss` (the VAE idiom) in Keras 3.

Both compute, from the tensor a tfp_bnn distribution layer returns (which
carries its distribution a, see `tfp_bnn.distributions`), TFP's
`_make_kl_divergence_fn` term: with z = test_points_fn(output),

    kl_estimator="analytic":  kl = KL(a || b)                  (tfd.kl_divergence)
    kl_estimator="mc":        kl = mean_{test_points_reduce_axis} (log a(z) - log b(z))
    loss = sum(weight * kl)

("auto": the closed form where TFP registers one for the pair, else Monte
Carlo). TFP's `use_exact_kl` is accepted as well, True for "analytic" and
False (TFP's default) for "mc"; the config stores `kl_estimator`, the name
every tfp_bnn layer uses.

where z is, by default (`tf.convert_to_tensor`), the output itself: the
sample the layer drew, so the Monte Carlo form is the one-sample estimate
TFP uses (MultivariateNormalTriL against an independent Normal prior has no
closed form). The regularizer is a layer's `activity_regularizer`, which
Keras divides by the batch size, as tf_keras did; the layer adds the sum
itself with `add_loss`. Either term enters the loss once per call.

In Keras 3 a layer's losses come from its calls on real tensors (in `fit`,
`evaluate`, `model(x)`); building a model on `keras.Input` computes none,
so `KLDivergenceAddLoss` passes the symbolic tensor through unchanged.
"""

import keras
from tfp_bnn._tf import tf

from tfp_bnn import _backend
from tfp_bnn import _validation as check
from tfp_bnn._substrate import tfd
from tfp_bnn._tfp_names import kl_estimator_with_tfp_alias
from tfp_bnn.distributions.carrier import DISTRIBUTION_TYPES
from tfp_bnn.distributions.carrier import attach
from tfp_bnn.distributions.carrier import distribution_of
from tfp_bnn.distributions.carrier import value_of
from tfp_bnn.distributions.carrier import with_value
from tfp_bnn.distributions.serialization import deserialize_distribution
from tfp_bnn.distributions.serialization import serialize_distribution
from tfp_bnn.layers.distribution.distribution_lambda import _default_dtype
from tfp_bnn.layers.distribution.distribution_lambda import _eager_on_jax
from tfp_bnn.layers.variational._variational_kl import KL_ESTIMATORS

# The config name of TFP's default test points, tf.convert_to_tensor(output).
_CONVERT = "convert_to_tensor"


def _check_distribution_b(distribution_b):
    """(distribution or callable, its config or None); a dict is a saved config."""
    if isinstance(distribution_b, dict):
        if "distribution" in distribution_b:
            return deserialize_distribution(distribution_b), distribution_b
        distribution_b = keras.saving.deserialize_keras_object(distribution_b)
    if isinstance(distribution_b, tfd.Distribution):
        return distribution_b, serialize_distribution(distribution_b, "distribution_b")
    if isinstance(distribution_b, keras.layers.Layer):
        raise ValueError("`distribution_b` as a Keras model or layer (TFP's trainable prior) is "
                         "not supported; pass a tfd.Distribution or a callable returning one.")
    if callable(distribution_b):
        return distribution_b, None
    raise ValueError(f"`distribution_b` must be a tfd.Distribution or a callable returning "
                     f"one, got {distribution_b!r}.")


def _check_reduce_axis(axis):
    if axis is None:
        return None
    if isinstance(axis, (list, tuple)):
        return tuple(check.integer(f"test_points_reduce_axis[{i}]", a, minimum=None)
                     for i, a in enumerate(axis))
    return check.integer("test_points_reduce_axis", axis, minimum=None)


def _check_test_points_fn(fn):
    if fn is tf.convert_to_tensor or fn is keras.ops.convert_to_tensor or fn == _CONVERT:
        return _CONVERT
    if isinstance(fn, dict):
        fn = keras.saving.deserialize_keras_object(fn)
    if not callable(fn) or isinstance(fn, str):
        raise ValueError("`test_points_fn` must be a callable output -> test points (default "
                         f"tf.convert_to_tensor), got {fn!r}.")
    return fn


@keras.saving.register_keras_serializable(package="tfp_bnn")
class KLDivergenceRegularizer(keras.regularizers.Regularizer):
    """Activity regularizer: KL(a || b) of a distribution layer's output a from `distribution_b`.

    Keras 3 counterpart of `tfp.layers.KLDivergenceRegularizer` (tf_keras
    only), with TFP's arguments and value (see the module docstring). Give
    it as the `activity_regularizer` of a tfp_bnn distribution layer, as in
    TFP's VAE: `MultivariateNormalTriL(encoded_size,
    activity_regularizer=KLDivergenceRegularizer(prior, weight=1.0))`. Keras
    adds the returned sum divided by the batch size (the output's first
    axis) to the model's losses, once per call.

    Args:
        distribution_b: b in KL(a || b): a `tfd.Distribution` with constant
            parameters (saved in the config; see
            `tfp_bnn.distributions.serialization`), or a callable with no
            arguments returning one (saved as Keras saves functions: a
            registered one loads with `safe_mode=True`).
        use_exact_kl: TFP's name of the estimator: True is
            `kl_estimator="analytic"`, False `"mc"`; None (default) with no
            `kl_estimator` is TFP's default, the Monte Carlo estimate.
        test_points_reduce_axis: the axes of log a(z) - log b(z) averaged
            over in the Monte Carlo estimate: None for all, () (the default)
            for none, an int or a tuple of ints.
        test_points_fn: callable output -> test points z; the output is the
            layer's output tensor, which forwards its distribution's methods
            (`sample`, `mean`, ...). The default `keras.ops.convert_to_tensor`
            (or TFP's `tf.convert_to_tensor`, the same) is the output
            itself, the layer's sample.
        weight: a number multiplying the KL, or None for 1.
        kl_estimator: "analytic" (`tfd.kl_divergence(a, b)`), "mc" (the
            Monte Carlo estimate at the test points) or "auto" (analytic where
            TFP registers a closed form for the pair); None follows
            `use_exact_kl`. Give one of the two, or both agreeing.

    Returns:
        Called on a distribution layer's output, the scalar sum(weight * kl).

    Example:
    >>> prior = tfd.Independent(tfd.Normal(tf.zeros(2), 1.0), reinterpreted_batch_ndims=1)
    >>> encoder = keras.Sequential([keras.Input((3,)),
    ...     keras.layers.Dense(tfp_bnn.layers.MultivariateNormalTriL.params_size(2)),
    ...     tfp_bnn.layers.MultivariateNormalTriL(
    ...         2, activity_regularizer=KLDivergenceRegularizer(prior, weight=1.0))])
    >>> z = encoder(np.ones((4, 3), "float32"))
    >>> len(encoder.losses)   # the batch's KL, divided by the batch size
    1
    """

    def __init__(self, distribution_b, use_exact_kl=None, test_points_reduce_axis=(),
                 test_points_fn=keras.ops.convert_to_tensor, weight=None, kl_estimator=None):
        self.distribution_b, self._distribution_b_config = _check_distribution_b(distribution_b)
        if kl_estimator is not None:
            check.one_of("kl_estimator", kl_estimator, KL_ESTIMATORS)
        self.kl_estimator = kl_estimator_with_tfp_alias(kl_estimator, "use_exact_kl",
                                                        use_exact_kl)
        self.test_points_reduce_axis = _check_reduce_axis(test_points_reduce_axis)
        self.test_points_fn = _check_test_points_fn(test_points_fn)
        self.weight = check.number("weight", weight, allow_none=True)

    @property
    def use_exact_kl(self):
        """TFP's name: whether the estimator is the closed form ("analytic")."""
        return self.kl_estimator == "analytic"

    def _prior(self, dtype):
        """b, rebuilt in `dtype` if it was saved in another float dtype (float64 models)."""
        prior = self.distribution_b
        if not isinstance(prior, tfd.Distribution):
            return prior()
        name, prior_name = (keras.backend.standardize_dtype(d) for d in (dtype, prior.dtype))
        if self._distribution_b_config is not None and prior_name != name \
                and keras.backend.is_float_dtype(name) \
                and keras.backend.is_float_dtype(prior_name):
            return deserialize_distribution(self._distribution_b_config, dtype)
        return prior

    def __call__(self, x):
        try:
            distribution_a = distribution_of(x)
        except ValueError as error:
            raise ValueError(f"{type(self).__name__} needs the output of a tfp_bnn distribution "
                             f"layer. {error}") from None
        with keras.name_scope("kldivergence_loss"):
            prior = self._prior(distribution_a.dtype)
            kl = None
            if self.kl_estimator != "mc":
                try:
                    kl = tfd.kl_divergence(distribution_a, prior)
                except NotImplementedError:
                    if self.kl_estimator == "analytic":
                        raise
            if kl is None and _backend.is_jax():
                fn = self.test_points_fn
                z = value_of(x) if fn == _CONVERT else fn(x)
                kl = keras.ops.mean(distribution_a.log_prob(z) - prior.log_prob(z),
                                    axis=self.test_points_reduce_axis)
            elif kl is None:  # TensorFlow's own reduction, as before
                fn = self.test_points_fn
                z = tf.convert_to_tensor(x) if fn == _CONVERT else fn(x)
                kl = tf.reduce_mean(distribution_a.log_prob(z) - prior.log_prob(z),
                                    axis=self.test_points_reduce_axis)
            if self.weight is not None:
                kl = keras.ops.cast(self.weight, kl.dtype) * kl
            return keras.ops.sum(kl)

    def get_config(self):
        axis = self.test_points_reduce_axis
        fn = self.test_points_fn
        return {
            "distribution_b": self._distribution_b_config if self._distribution_b_config
            is not None else keras.saving.serialize_keras_object(self.distribution_b),
            "test_points_reduce_axis": list(axis) if isinstance(axis, tuple) else axis,
            "test_points_fn": fn if fn == _CONVERT else keras.saving.serialize_keras_object(fn),
            "weight": self.weight,
            "kl_estimator": self.kl_estimator,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


@keras.saving.register_keras_serializable(package="tfp_bnn")
class KLDivergenceAddLoss(keras.layers.Layer):
    """Pass-through layer adding KL(a || b) of its input's distribution a to the loss.

    Keras 3 counterpart of `tfp.layers.KLDivergenceAddLoss` (tf_keras
    only): put it after a tfp_bnn distribution layer. It adds the same term
    as `KLDivergenceRegularizer` (see there and the module docstring), with
    `add_loss` and no division by the batch size, once per call, and
    returns its input, still carrying the distribution, so the model's loss
    (`lambda y, rv_y: -rv_y.log_prob(y)`) works after it as after the
    distribution layer. Note TFP's defaults differ between the two:
    `test_points_reduce_axis` is None (average over all axes) here, () in
    the regularizer.

    Args:
        distribution_b: b in KL(a || b), as for `KLDivergenceRegularizer`.
        use_exact_kl: TFP's name of the estimator: True is
            `kl_estimator="analytic"`, False `"mc"`; None (default) with no
            `kl_estimator` is TFP's default, the Monte Carlo estimate.
        test_points_reduce_axis: the axes averaged over in the Monte Carlo
            estimate: None (the default) for all, () for none, an int or a
            tuple of ints.
        test_points_fn: callable output -> test points; default
            `keras.ops.convert_to_tensor` (or TFP's `tf.convert_to_tensor`,
            the same), the input's own sample.
        weight: a number multiplying the KL, or None for 1.
        kl_estimator: "analytic", "mc" or "auto", as for
            `KLDivergenceRegularizer`; None follows `use_exact_kl`.
        **kwargs: base layer arguments (name, dtype, ...). Under a mixed
            precision policy the layer defaults to float32, as the
            distribution layers do.

    Call arguments:
        inputs: the output of a tfp_bnn distribution layer.

    Returns:
        `inputs`' values, carrying the same distribution.

    Example:
    >>> prior = tfd.MultivariateNormalDiag(loc=tf.zeros(2))
    >>> encoder = keras.Sequential([keras.Input((3,)),
    ...     keras.layers.Dense(tfp_bnn.layers.MultivariateNormalTriL.params_size(2)),
    ...     tfp_bnn.layers.MultivariateNormalTriL(2),
    ...     KLDivergenceAddLoss(prior, weight=1.0)])
    >>> z = encoder(np.ones((4, 3), "float32"))
    >>> len(encoder.losses), z.stddev().shape   # the KL; z still carries the distribution
    (1, TensorShape([4, 2]))
    """

    def __init__(self, distribution_b, use_exact_kl=None, test_points_reduce_axis=None,
                 test_points_fn=keras.ops.convert_to_tensor, weight=None, kl_estimator=None,
                 **kwargs):
        super().__init__(**_default_dtype(kwargs))
        self._regularizer = KLDivergenceRegularizer(
            distribution_b, use_exact_kl=use_exact_kl,
            test_points_reduce_axis=test_points_reduce_axis, test_points_fn=test_points_fn,
            weight=weight, kl_estimator=kl_estimator)

    @property
    def distribution_b(self):
        """b in KL(a || b): the distribution (or callable) given."""
        return self._regularizer.distribution_b

    def __call__(self, inputs, *args, **kwargs):
        if isinstance(inputs, DISTRIBUTION_TYPES):
            # What a distribution layer returns eagerly on JAX: Keras passes only tensors
            # positionally, so its value goes in, carrying it.
            inputs = attach(keras.ops.copy(value_of(inputs)), inputs)
        return super().__call__(inputs, *args, **kwargs)

    def call(self, inputs):
        try:
            distribution = distribution_of(inputs)
        except ValueError as error:
            raise ValueError(f"{type(self).__name__} must come right after a tfp_bnn "
                             f"distribution layer. {error}") from None
        self.add_loss(self._regularizer(inputs))
        if _backend.is_jax():
            if _eager_on_jax(inputs):  # as the distribution layer: the distribution
                return with_value(distribution, inputs)
            return attach(keras.ops.copy(inputs), distribution)
        return attach(tf.identity(inputs), distribution)

    def compute_output_spec(self, inputs):
        # The symbolic input carries no distribution, and no loss is kept from
        # a symbolic call: the output is the input's spec.
        return keras.KerasTensor(inputs.shape, inputs.dtype)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(self._regularizer.get_config())
        return config

    @classmethod
    def from_config(cls, config):
        return cls(**config)
