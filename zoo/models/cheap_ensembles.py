"""Cheap ensembles of the digits CNN for the covariate-shift comparison
(`zoo.experiments.covariate_shift`): SWAG, BatchEnsemble and Packed-Ensembles.

- `batch_ensemble_cnn`: the digits CNN's layers (Conv 16 -> MaxPool -> Conv 32 -> Dense 64
  -> Dense 10) as BatchEnsemble layers (`tfp_bnn.layers.BatchEnsembleConv2D`,
  `BatchEnsembleDense`; Wen et al. 2020): NUM_MEMBERS members sharing each kernel, with
  rank-1 fast weights of their own, trained together with `tfp_bnn.ensembles.MemberLoss`.
- `packed_cnn`: the same layers as Packed-Ensembles (`tfp_bnn.layers.PackedConv2D`,
  `PackedDense`, `PackedOutput`; Laurent et al. 2023) with NUM_MEMBERS members and width
  factor PACKED_ALPHA: each member a subnetwork of PACKED_ALPHA / NUM_MEMBERS the width
  (here 2/4: half the CNN). The channels are moved first before the Flatten, so each
  member's features stay one contiguous group.
- `swag_cnn`: `zoo.models.digits.deterministic_cnn` trained as its own row, with
  `tfp_bnn.callbacks.SWAG` collecting the weights once per epoch over the second half of the
  run (SWAG_START of EPOCHS; low rank SWAG_RANK); the model returned is the SWAG predictive
  of SWAG_MEMBERS weight draws (`SWAG.predictive_model`, a deep ensemble of the draws).
  Deviation from Maddox et al. (2019): the zoo's constant-rate Adam, not SGD at a constant
  high rate after convergence; the same 60 epochs as every other row.

BatchEnsemble and Packed-Ensembles are predicted as the mixture of their members
(`tfp_bnn.predict` with num_samples a multiple of NUM_MEMBERS; `zoo.run.scoring.predict`
takes exactly NUM_MEMBERS). Every trainer is called as `trainer(data, epochs=, batch_size=, seed=)` and returns a
`zoo.models.digits.Trained`.

Example:
>>> data = tfp_bnn.data.load_digits(seed=0)
>>> small = {key: values[:64] for key, values in data.items()}   # the benchmark: all, 60 epochs
>>> trained = swag_cnn(small, epochs=4, seed=0, members=3, filters=(4, 8), hidden_units=(16,))
>>> trained.details["snapshots"], trained.details["members"]
(2, 3)
"""

import keras

import tfp_bnn
from tfp_bnn import _validation as check
from zoo.models import _common
from zoo.models import digits as digits_models

NUM_MEMBERS = 4  # torch-uncertainty's and the papers' usual M for small networks
PACKED_ALPHA = 2

# SWAG collects from this share of the epochs on (Maddox et al. start after a pretraining
# run; here the second half of the zoo's run), keeps the last SWAG_RANK deviations, and
# predicts with SWAG_MEMBERS weight draws (the paper: 30).
SWAG_START = 0.5
SWAG_RANK = 20
SWAG_MEMBERS = 30


def _compiled(model, learning_rate):
    model.compile(optimizer=_common.optimizer(learning_rate, None),
                  loss=tfp_bnn.ensembles.MemberLoss(
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True)),
                  metrics=[tfp_bnn.ensembles.MixtureAccuracy(name="accuracy")])
    return _common.build_optimizer(model)


def _architecture(input_shape, task, num_classes, seed, num_members):
    input_shape, _, seed = _common.check_common(input_shape, task, num_classes, None, seed,
                                                needs_num_train=False)
    if task != "classification":
        raise ValueError(f"the cheap-ensemble CNNs are classifiers; got task {task!r}.")
    num_members = check.integer("num_members", num_members, minimum=2)
    keras.utils.set_random_seed(seed)  # the fast weights' and groups' own initialisers
    return input_shape, seed, num_members


def batch_ensemble_cnn(input_shape, task="classification", num_classes=None, num_train=None,
                       seed=0, num_members=NUM_MEMBERS, filters=digits_models.CNN_FILTERS,
                       hidden_units=digits_models.CNN_UNITS,
                       learning_rate=_common.LEARNING_RATE):
    """A compiled BatchEnsemble CNN: the digits CNN's layers, M members sharing each kernel.

    Args:
        input_shape: [height, width, channels]; num_classes: K.
        num_train: accepted for the common builder signature; unused.
        seed: int >= 0: the kernels' and fast weights' initialisation.
        num_members: M >= 2.
        filters, hidden_units, learning_rate: as `zoo.models.digits.deterministic_cnn`.

    Returns:
        A compiled `keras.Model` with outputs [B, M, K] (logits per member).
    """
    input_shape, seed, members = _architecture(input_shape, task, num_classes, seed,
                                               num_members)
    inputs = keras.Input(input_shape, name="inputs")
    hidden = tfp_bnn.layers.EnsembleTile(members)(inputs)
    for index, count in enumerate(_common.layer_sizes("filters", filters)):
        hidden = tfp_bnn.layers.BatchEnsembleConv2D(
            count, digits_models.CNN_KERNEL_SIZE, members, padding="same", activation="relu",
            data_format=_common.IMAGE_DATA_FORMAT,
            kernel_initializer=_common.glorot(seed, index), name=f"conv_{index}")(hidden)
        if index < digits_models.CNN_POOLS:
            hidden = keras.layers.MaxPooling2D(2, padding="same", name=f"pool_{index}")(hidden)
    hidden = keras.layers.Flatten(name="flatten")(hidden)
    widths = _common.layer_sizes("hidden_units", hidden_units) + (num_classes,)
    for index, units in enumerate(widths, start=len(filters)):
        last = index == len(filters) + len(widths) - 1
        hidden = tfp_bnn.layers.BatchEnsembleDense(
            units, members, activation=None if last else "relu",
            kernel_initializer=_common.glorot(seed, index), name=f"dense_{index}")(hidden)
    outputs = tfp_bnn.layers.EnsembleUntile(members)(hidden)
    return _compiled(keras.Model(inputs, outputs, name="batch_ensemble_cnn"), learning_rate)


def packed_cnn(input_shape, task="classification", num_classes=None, num_train=None, seed=0,
               num_members=NUM_MEMBERS, alpha=PACKED_ALPHA, filters=digits_models.CNN_FILTERS,
               hidden_units=digits_models.CNN_UNITS, learning_rate=_common.LEARNING_RATE):
    """A compiled Packed-Ensembles CNN: the digits CNN's layers as M grouped subnetworks.

    Args:
        input_shape: [height, width, channels]; num_classes: K.
        num_train: accepted for the common builder signature; unused.
        seed: int >= 0: the initialisation.
        num_members: M >= 2; alpha: the width factor (each member alpha / M of the width).
        filters, hidden_units, learning_rate: as `zoo.models.digits.deterministic_cnn`.

    Returns:
        A compiled `keras.Model` with outputs [B, M, K] (logits per member).
    """
    input_shape, seed, members = _architecture(input_shape, task, num_classes, seed,
                                               num_members)
    inputs = keras.Input(input_shape, name="inputs")
    hidden = inputs
    for index, count in enumerate(_common.layer_sizes("filters", filters)):
        hidden = tfp_bnn.layers.PackedConv2D(
            count, digits_models.CNN_KERNEL_SIZE, members, alpha=alpha, first=index == 0,
            padding="same", activation="relu", data_format=_common.IMAGE_DATA_FORMAT,
            name=f"conv_{index}")(hidden)
        if index < digits_models.CNN_POOLS:
            hidden = keras.layers.MaxPooling2D(2, padding="same", name=f"pool_{index}")(hidden)
    # Channels first, then Flatten: member m's features are one contiguous block.
    hidden = keras.layers.Permute((3, 1, 2), name="channels_first")(hidden)
    hidden = keras.layers.Flatten(name="flatten")(hidden)
    for index, units in enumerate(_common.layer_sizes("hidden_units", hidden_units),
                                  start=len(filters)):
        hidden = tfp_bnn.layers.PackedDense(units, members, alpha=alpha, activation="relu",
                                            name=f"dense_{index}")(hidden)
    hidden = tfp_bnn.layers.PackedDense(num_classes, members, alpha=alpha, last=True,
                                        name="logits")(hidden)
    outputs = tfp_bnn.layers.PackedOutput(members)(hidden)
    return _compiled(keras.Model(inputs, outputs, name="packed_cnn"), learning_rate)


def swag_cnn(data, epochs=digits_models.EPOCHS, batch_size=digits_models.BATCH_SIZE, seed=0,
             members=SWAG_MEMBERS, max_rank=SWAG_RANK, **overrides):
    """Trainer: the deterministic CNN with SWAG collecting over the second half of its run.

    Args:
        data: dict with `x_train` and `y_train`.
        epochs, batch_size, seed: as `zoo.models.digits.train`; `seed` also seeds the draws.
        members: SWAG weight draws in the predictive (>= 1).
        max_rank: the deviation matrix's columns (>= 2).
        **overrides: `deterministic_cnn` arguments (filters, hidden_units, ...).

    Returns:
        `zoo.models.digits.Trained`: the SWAG predictive model, the CNN's History, details
        `snapshots` (weights collected) and `members`.
    """
    if "x_train" not in data:
        raise ValueError(f"`data` needs the key 'x_train'; it has {sorted(data)}.")
    model = digits_models.deterministic_cnn(**digits_models.DIGITS,
                                            num_train=len(data["x_train"]), seed=seed,
                                            **overrides)
    swag = tfp_bnn.callbacks.SWAG(start_epoch=int(SWAG_START * epochs), max_rank=max_rank)
    history = digits_models.train(model, data, epochs=epochs, batch_size=batch_size, seed=seed,
                                  callbacks=[swag])
    return digits_models.Trained(swag.predictive_model(members, seed=seed), history,
                                 {"snapshots": swag.num_collected, "members": members})
