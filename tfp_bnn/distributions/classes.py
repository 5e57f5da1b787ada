"""Class log-probabilities of a classifier's output distribution."""

from keras import ops

from tfp_bnn._substrate import tfd


def class_log_probabilities(distribution, dtype="float32"):
    """log p(class) [rows, K] of a Categorical, OneHotCategorical or single Bernoulli.

    A Bernoulli (one binary output, possibly inside `tfd.Independent`) is
    the two classes [0, 1]. Used by `tfp_bnn.predict.classification` and
    `tfp_bnn.export.export_predictive`, which read distribution heads.

    Raises:
        ValueError: for any other family.
    """
    base = distribution
    while isinstance(base, tfd.Independent):
        base = base.distribution
    if isinstance(base, (tfd.Categorical, tfd.OneHotCategorical)):
        return ops.log_softmax(ops.cast(base.logits_parameter(), dtype))
    if isinstance(base, tfd.Bernoulli) and distribution.event_shape.num_elements() in (None, 1):
        logits = ops.reshape(ops.cast(base.logits_parameter(), dtype), (-1, 1))
        return ops.concatenate([ops.log_sigmoid(-logits), ops.log_sigmoid(logits)], -1)
    raise ValueError(
        f"A classifier needs a Categorical, OneHotCategorical or single Bernoulli output "
        f"distribution, got {type(distribution).__name__}; use tfp_bnn.predict.distribution "
        "for other families.")
