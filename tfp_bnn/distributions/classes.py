"""Class log-probabilities of a classifier's output distribution."""

from keras import ops

from tfp_bnn._substrate import tfd


def class_logits(distribution):
    """The logits of a Categorical, OneHotCategorical or single Bernoulli, and which.

    Returns:
        ("categorical", logits [rows, K]) for a Categorical or OneHotCategorical
        (possibly inside `tfd.Independent`), ("bernoulli", logits) for a single
        Bernoulli, the log-odds of class 1 of the two classes [0, 1].

    Raises:
        ValueError: for any other family.
    """
    base = distribution
    while isinstance(base, tfd.Independent):
        base = base.distribution
    if isinstance(base, (tfd.Categorical, tfd.OneHotCategorical)):
        return "categorical", base.logits_parameter()
    if isinstance(base, tfd.Bernoulli) and distribution.event_shape.num_elements() in (None, 1):
        return "bernoulli", base.logits_parameter()
    raise ValueError(
        f"A classifier needs a Categorical, OneHotCategorical or single Bernoulli output "
        f"distribution, got {type(distribution).__name__}; use tfp_bnn.predict.distribution "
        "for other families.")


def class_log_probabilities(distribution, dtype="float32"):
    """log p(class) [rows, K] of a Categorical, OneHotCategorical or single Bernoulli.

    A Bernoulli (one binary output, possibly inside `tfd.Independent`) is
    the two classes [0, 1]. Used by `tfp_bnn.predict.classification` and
    `tfp_bnn.export.export_predictive`, which read distribution heads.

    Raises:
        ValueError: for any other family.
    """
    kind, logits = class_logits(distribution)
    if kind == "categorical":
        return ops.log_softmax(ops.cast(logits, dtype))
    logits = ops.reshape(ops.cast(logits, dtype), (-1, 1))
    return ops.concatenate([ops.log_sigmoid(-logits), ops.log_sigmoid(logits)], -1)
