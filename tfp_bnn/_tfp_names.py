"""What tfp_bnn takes instead of `tfp.layers`' function-valued arguments.

`tfp.layers.DenseFlipout` and its siblings are configured with functions
(`kernel_posterior_fn`, `kernel_divergence_fn`, ...). tfp_bnn's layers take
small registered objects and numbers instead (`posterior=`, `prior=`,
`kl_weight=`, `bayesian_bias=`), which serialize without lambdas. A ported
program that still passes a TFP name gets a ValueError that says what to
write instead, rather than Keras' bare "Unrecognized keyword arguments".

One table, used by every variational layer (`BayesianLayer`, `NodeLayer`)
before `keras.layers.Layer.__init__` sees the keyword arguments.
"""

import math

import numpy as np
from tfp_bnn._tf import tf
from tfp_bnn._tf import tfp

from tfp_bnn import _validation


_DIVERGENCE = (
    "tfp_bnn adds kl_weight * KL(q || p) to the loss itself: for TFP's "
    "`lambda q, p, _: tfd.kl_divergence(q, p) / N` pass `kl_weight=1/N` or train with "
    "`tfp_bnn.callbacks.KLScheduler(num_examples=N)`; `kl_estimator='mc'` gives the "
    "sampled KL, 'analytic' the closed form; `kl_weight=0` drops the term (TFP's None)"
)
_TENSOR = (
    "the draw is fixed by the layer class (DenseReparameterization: one sample per "
    "batch, DenseFlipout: Flipout, DenseLocalReparameterization: output noise); for "
    "the posterior mean instead of a sample (TFP's `lambda d: d.mean()`) call "
    "`tfp_bnn.set_mean_mode(model)` before predicting"
)

# TFP argument name -> what to pass to a tfp_bnn layer instead.
TFP_ARGUMENTS = {
    "kernel_posterior_fn": (
        "pass `posterior=tfp_bnn.posteriors.MeanFieldNormal(...)` (TFP's "
        "default_mean_field_normal_fn), another tfp_bnn.posteriors.Posterior, or your own "
        "Posterior subclass"
    ),
    "kernel_prior_fn": (
        "pass `prior=tfp_bnn.priors.NormalPrior(...)` (TFP's default_multivariate_normal_fn "
        "is NormalPrior(0, 1), the default), another tfp_bnn.priors.Prior, or your own "
        "Prior subclass"
    ),
    "kernel_divergence_fn": _DIVERGENCE,
    "bias_divergence_fn": _DIVERGENCE + " (one kl_weight covers kernel and bias)",
    "bias_posterior_fn": (
        "pass `bayesian_bias=True` for a Normal posterior on the bias (TFP's "
        "default_mean_field_normal_fn()), `bayesian_bias=False` (the default) for a "
        "deterministic bias (TFP's default_mean_field_normal_fn(is_singular=True)), or "
        "`use_bias=False` for no bias (TFP's bias_posterior_fn=None)"
    ),
    "bias_prior_fn": (
        "with `bayesian_bias=True` the bias gets the layer's `prior=` too; a deterministic "
        "bias (the default, TFP's bias_prior_fn=None) has no prior"
    ),
    "kernel_posterior_tensor_fn": _TENSOR,
    "bias_posterior_tensor_fn": _TENSOR,
}


def _closure_value(fn, name, depth=2):
    """The free variable `name` of closure `fn` or of the closures it holds, or None.

    TFP's `default_mean_field_normal_fn(is_singular=...)` keeps `is_singular`
    in the closure of the `loc_scale_fn` its returned function holds.
    """
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    if code is None:
        return None
    for var, cell in zip(code.co_freevars, cells):
        try:
            value = cell.cell_contents
        except ValueError:  # an empty cell
            continue
        if var == name:
            return value
        if depth > 0 and callable(value):
            found = _closure_value(value, name, depth - 1)
            if found is not None:
                return found
    return None


def _divergence_weight(fn):
    """The factor `fn` puts on KL(q || p), when it is a scaled KL; else None.

    Calls `fn` on two unit-variance Normals one apart (KL = 1/2); a TFP
    divergence function of the common form `kl(q, p) / N` returns 1 / (2N).
    """
    if not callable(fn):
        return None
    tfd = tfp.distributions  # TensorFlow's: `fn` is a TensorFlow program's function
    q = tfd.Independent(tfd.Normal([1.0], [1.0]), reinterpreted_batch_ndims=1)
    p = tfd.Independent(tfd.Normal([0.0], [1.0]), reinterpreted_batch_ndims=1)
    try:
        value = float(fn(q, p, q.sample(seed=(1, 2))))
    except Exception:  # noqa: BLE001 - any user function: no suggestion then
        return None
    weight = 2.0 * value
    if not math.isfinite(weight) or weight < 0:
        return None
    return weight


def _specific_advice(name, value):
    """A suggestion for the value passed, when it can be read off the value."""
    if name in ("kernel_divergence_fn", "bias_divergence_fn"):
        if value is None:
            return "for no KL term pass `kl_weight=0`"
        weight = _divergence_weight(value)
        if weight is None:
            return None
        advice = (f"tfp_bnn adds kl_weight * KL(q || p) to the loss itself and this function "
                  f"scales the KL by {weight:.6g}: pass `kl_weight={weight:.6g}`")
        if weight > 0 and abs(1.0 / weight - round(1.0 / weight)) < 1e-3 / weight:
            advice += (" or train with "
                       f"`tfp_bnn.callbacks.KLScheduler(num_examples={round(1.0 / weight)})`")
        return advice
    if name == "bias_posterior_fn":
        if value is None:
            return "TFP's bias_posterior_fn=None means no bias: pass `use_bias=False`"
        singular = _closure_value(value, "is_singular")
        if singular is True:
            return "a point-mass bias is tfp_bnn's default: drop the argument (bayesian_bias=False)"
        if singular is False:
            return "a Normal bias posterior is `bayesian_bias=True`"
    return None


def reject_tfp_arguments(layer_name, kwargs):
    """Raises ValueError if `kwargs` holds a `tfp.layers` argument name.

    Args:
        layer_name: the class name of the layer being constructed.
        kwargs: the keyword arguments the layer did not recognize itself.

    Raises:
        ValueError: naming the first TFP argument found, its value, and the
            tfp_bnn argument to use instead.
    """
    for name, advice in TFP_ARGUMENTS.items():
        if name not in kwargs:
            continue
        value = kwargs[name]
        advice = _specific_advice(name, value) or advice
        raise ValueError(
            f"`{name}` is a tfp.layers argument that {layer_name} does not take "
            f"(got {name}={value!r}): {advice}."
        )


# What DenseVariational takes instead of TFP's `make_posterior_fn` /
# `make_prior_fn`, when the builder's own distribution cannot be read.
BUILDER_ADVICE = {
    "posterior": (
        "pass `posterior=`, a tfp_bnn.posteriors.Posterior that starts where the builder's "
        "distribution starts: for TFP's posterior_mean_field (Independent Normal) "
        "`MeanFieldNormal(rho_init=math.log(math.e - 1), rho_init_stddev=0.0, "
        "scale_offset=1e-5)` with `kernel_initializer='zeros'`; for a VariableLayer + "
        "MultivariateNormalTriL builder `FullCovarianceNormal(rho_init=0.0, "
        "rho_init_stddev=0.0, scale_offset=1e-5)` with `kernel_initializer='zeros'`"
    ),
    "prior": (
        "pass `prior=`, a tfp_bnn.priors.Prior: `TrainableNormalPrior()` for TFP's "
        "prior_trainable (N(t, 1), t trainable from 0), `NormalPrior(loc, scale)` for a "
        "fixed Normal (the default, NormalPrior(), is N(0, 1))"
    ),
}
# TFP's MultivariateNormalTriL layer and posterior_mean_field add 1e-5 to the scale.
_TFP_SCALE_SHIFT = 1e-5
_NAMED_RHO = {0.0: "0.0", round(math.log(math.e - 1.0), 4): "math.log(math.e - 1)"}


def _builder_start(builder):
    """(distribution, has_variables) a TFP DenseVariational builder starts at, or None.

    TFP calls `builder(kernel_size, bias_size, dtype)` and the tf_keras model
    it returns on the layer's inputs; its variables ignore them.
    """
    try:
        model = builder(3, 1, "float32")
        output = model(tf.zeros([1, 1]))
        distribution = getattr(output, "tensor_distribution", output)
        mean = np.asarray(distribution.mean(), np.float64).ravel()
        stddev = np.asarray(distribution.stddev(), np.float64).ravel()
    except Exception:  # noqa: BLE001 - any user function: the general advice then
        return None
    if mean.size != 4 or stddev.size != 4:
        return None
    return distribution, bool(getattr(model, "trainable_variables", ())), mean, stddev


def _constant(values):
    """The value all of `values` share (to float32 precision), else None."""
    return float(values[0]) if np.allclose(values, values[0], rtol=1e-6, atol=1e-7) else None


def _rho_text(scale):
    rho = round(math.log(math.expm1(scale - _TFP_SCALE_SHIFT)), 4) + 0.0
    return _NAMED_RHO.get(rho, f"{rho:g}")


def builder_advice(argument, builder):
    """What to pass as `posterior=` / `prior=` for TFP's builder function `builder`.

    Builds the builder's tf_keras model and reads its starting distribution:
    a full-covariance `MultivariateNormalTriL` maps to `FullCovarianceNormal`,
    a diagonal one to `MeanFieldNormal`, with the arguments that give the same
    start; a prior with variables to `TrainableNormalPrior`, a fixed one to
    `NormalPrior(loc, scale)`. Falls back to `BUILDER_ADVICE[argument]`.

    Args:
        argument: "posterior" or "prior".
        builder: the `make_posterior_fn` / `make_prior_fn` value.

    Returns:
        One clause of advice for an error message.
    """
    start = _builder_start(builder)
    if start is None:
        return BUILDER_ADVICE[argument]
    distribution, has_variables, mean, stddev = start
    loc, scale = _constant(mean), _constant(stddev)
    if loc is None or scale is None or scale <= 0:
        return BUILDER_ADVICE[argument]
    if argument == "prior":
        if has_variables:
            shown = "" if scale == 1.0 else f"scale={scale:g}"
            return (f"this prior starts at N({loc:g}, {scale:g}^2) with trainable variables: "
                    f"pass `prior=tfp_bnn.priors.TrainableNormalPrior({shown})`")
        shown = "" if (loc, scale) == (0.0, 1.0) else f"loc={loc:g}, scale={scale:g}"
        return (f"this prior is a fixed N({loc:g}, {scale:g}^2): pass "
                f"`prior=tfp_bnn.priors.NormalPrior({shown})`")
    initializer = "'zeros'" if loc == 0.0 else f"keras.initializers.Constant({loc:g})"
    if scale <= _TFP_SCALE_SHIFT:
        return BUILDER_ADVICE[argument]
    full = isinstance(distribution, tfp.distributions.MultivariateNormalTriL)
    family = "FullCovarianceNormal" if full else "MeanFieldNormal"
    kind = "full-covariance" if family == "FullCovarianceNormal" else "mean-field"
    return (f"this posterior starts {kind} at loc {loc:g}, scale {scale:.6g}: pass "
            f"`posterior=tfp_bnn.posteriors.{family}(rho_init={_rho_text(scale)}, "
            f"rho_init_stddev=0.0, scale_offset=1e-5)` with `kernel_initializer={initializer}` "
            f"and `bias_initializer={initializer}`, which starts there")


def kl_estimator_with_tfp_alias(kl_estimator, tfp_name, tfp_value):
    """The `kl_estimator` that it and TFP's boolean for the same choice say together.

    Layers ported from TFP keep TFP's name for the estimator (`kl_use_exact`
    of `DenseVariational`, `use_exact_kl` of the KL-divergence layers) so
    that TFP code ports by its imports alone, and take `kl_estimator`, the
    name every tfp_bnn layer uses and the one their configs store: True is
    "analytic", False "mc". None for both is TFP's default, "mc".

    Args:
        kl_estimator: the `kl_estimator` given, or None (validated by the caller).
        tfp_name: TFP's argument name, for the error message.
        tfp_value: TFP's boolean, or None when not given.

    Returns:
        The estimator's name.

    Raises:
        ValueError: naming `tfp_name` if it is not a bool, or both arguments
            if they disagree.

    Example:
    >>> kl_estimator_with_tfp_alias(None, "kl_use_exact", True)
    'analytic'
    """
    if tfp_value is None:
        return "mc" if kl_estimator is None else kl_estimator
    tfp_value = _validation.boolean(tfp_name, tfp_value)
    implied = "analytic" if tfp_value else "mc"
    if kl_estimator is not None and kl_estimator != implied:
        raise ValueError(
            f"`{tfp_name}`={tfp_value} and `kl_estimator`={kl_estimator!r} disagree: "
            f"{tfp_name}={tfp_value} is kl_estimator={implied!r}; give one of them."
        )
    return implied
