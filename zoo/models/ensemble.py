"""Deep ensembles (Lakshminarayanan, Pritzel and Blundell 2017): the `deep_ensemble` family.

M members trained side by side in one `fit` (`tfp_bnn.ensembles`); the predictive is their
equal mixture. As in the paper's UCI setup the default member is a plain (non-Bayesian) MLP
of one hidden layer of 50 units with a heteroscedastic Gaussian output [mean, s(x)], M = 5,
Adam. Any registry model can be the member instead (`member=`). Builder arguments as in
`zoo.models._common`; predict with a `num_samples` that is a multiple of `num_members`.

Example:
>>> model = deep_ensemble((8,), num_train=927, num_members=5, hidden_units=(16,))
>>> x_test = np.random.rand(4, 8).astype("float32")
>>> prediction = tfp_bnn.predict.regression(model, x_test, num_samples=5)   # one per member
>>> prediction.mean.shape
(4, 1)
"""

import keras

from tfp_bnn import _validation as check
from tfp_bnn import ensembles
from tfp_bnn.losses import GaussianNLL
from zoo.models import _common
from zoo.models import limits

NUM_MEMBERS = 5
# The plain member, not in the registry: Dense layers only (so the ensemble runs vectorized).
MLP = "mlp"


def plain_mlp(input_shape, task, num_classes, seed, hidden_units):
    """A deterministic MLP: logits, or [mean, s(x)] for regression (Kendall and Gal 2017)."""
    def make(units, activation, index, name):
        return keras.layers.Dense(units, activation=activation,
                                  kernel_initializer=_common.glorot(seed, index), name=name)
    return _common.mlp(make, "mlp", input_shape, task, num_classes, True, hidden_units,
                       _common.LEARNING_RATE, None)


def deep_ensemble(input_shape, task="regression", num_classes=None, num_train=None, seed=0,
                  num_members=NUM_MEMBERS, member=MLP, hidden_units=None,
                  learning_rate=_common.LEARNING_RATE, decay_steps=None, member_options=None,
                  spec_of=None):
    """A compiled deep ensemble of `num_members` members.

    Member m is built with seed `num_members * seed + m` (its own initial weights). The loss
    is `tfp_bnn.ensembles.MemberLoss` of the member loss (Gaussian NLL or sparse categorical
    cross-entropy): the sum of the member losses, so each member is trained on its own loss.

    Args:
        input_shape, task, num_classes, num_train, seed, hidden_units, learning_rate,
            decay_steps: as `zoo.models.bbb.bbb_mlp` (num_train is checked for every member
            and used by Bayesian ones).
        num_members: M >= 1.
        member: "mlp" (plain MLP, heteroscedastic for regression) or a registry model name.
        member_options: dict of further arguments of the registry member's builder.
        spec_of: name -> `ModelSpec`, for a registry member (the registry's `get_spec`, which
            `zoo.build_model("deep_ensemble", ...)` passes).

    Returns:
        A compiled `keras.Model` with outputs [batch, M, ...] (see `tfp_bnn.ensembles`).
    """
    spec = None
    if member != MLP:
        if member == "deep_ensemble":
            raise ValueError("`member` cannot be 'deep_ensemble' itself.")
        if spec_of is None:
            raise ValueError(f"member {member!r} is a registry model: build the ensemble with "
                             "zoo.build_model('deep_ensemble', ...), or pass `spec_of`.")
        spec = spec_of(member)
        if task in _common.TASKS and task not in spec.tasks:
            raise ValueError(f"member {member!r} does not support task {task!r}.")
    # num_train as every zoo builder takes it (the plain member does not use it).
    input_shape, num_train, seed = _common.check_common(input_shape, task, num_classes,
                                                        num_train, seed)
    num_members = check.integer("num_members", num_members, maximum=100)
    if member_options is not None and not isinstance(member_options, dict):
        raise ValueError(f"`member_options` must be a dict, got {member_options!r}.")
    member_options = dict(member_options or {})
    if member == MLP:
        if member_options:
            raise ValueError(f"member 'mlp' has no argument {sorted(member_options)[0]!r}.")

        def build(member_seed):
            return plain_mlp(input_shape, task, num_classes, member_seed, hidden_units)
    else:
        if hidden_units is not None:
            member_options["hidden_units"] = hidden_units
        spec.check_overrides(member_options)

        def build(member_seed):
            return spec.builder(input_shape, task=task, num_classes=num_classes,
                                num_train=num_train, seed=member_seed, **member_options)
    # Member 0 checks its own size; the other M - 1 are made only if M of them fit.
    members = [build(num_members * seed)]
    weights = members[0].count_params()
    limits.check_parameter_count("deep_ensemble", num_members * weights,
                                 f"{num_members} members of {weights:,} weights")
    members += [build(num_members * seed + m) for m in range(1, num_members)]
    model = ensembles.deep_ensemble(members, name=f"deep_ensemble_{member}")
    if task == "classification":
        # Each member's cross-entropy; the accuracy of the mixture (the ensemble's prediction).
        model.compile(optimizer=_common.optimizer(learning_rate, decay_steps),
                      loss=ensembles.MemberLoss(
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True)),
                      metrics=[ensembles.MixtureAccuracy(name="accuracy")])
    else:
        model.compile(optimizer=_common.optimizer(learning_rate, decay_steps),
                      loss=ensembles.MemberLoss(GaussianNLL()))
    return _common.build_optimizer(model)
