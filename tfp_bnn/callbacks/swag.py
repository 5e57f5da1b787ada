"""SWAG: a Gaussian over the weights, fitted to the SGD iterates of one training run.

Maddox, Izmailov, Garipov, Vetrov and Wilson (2019), "A simple baseline for Bayesian
uncertainty in deep learning" (NeurIPS). From some epoch on, with a constant or cyclic
learning rate, the weights theta_i read every c epochs give the running moments (Algorithm 1)

    theta_bar  = (n theta_bar  + theta_i)   / (n + 1)
    theta2_bar = (n theta2_bar + theta_i^2) / (n + 1)
    D          = the last K deviations theta_i - theta_bar_i (theta_bar after the update)

and the posterior N(theta_bar, 0.5 (Sigma_diag + D D^T / (K - 1))), with
Sigma_diag = diag(max(theta2_bar - theta_bar^2, 0)) and K the columns D holds (the
covariance scaled by 1/2, as the paper samples it, eq. 1), sampled as

    theta = theta_bar + (1/sqrt(2)) Sigma_diag^(1/2) z1 + (1/sqrt(2 (K - 1))) D z2,

z1 ~ N(0, I_P), z2 ~ N(0, I_K). SWAG-Diag (`diagonal_only=True`) is N(theta_bar, Sigma_diag),
unscaled, and keeps no D. SWA is theta_bar alone (Izmailov et al. 2018).

Deviations from Algorithm 1: snapshots are taken at epoch ends, `collect_every` epochs
apart (the algorithm counts c in steps; the paper's experiments collect once per epoch);
the first snapshot opens the average (the algorithm starts it at the pretrained weights
theta_0); the moments are kept in float64 whatever the weights' dtype.
"""

import math

import keras
import numpy as np

from tfp_bnn import _keras_internals
from tfp_bnn import _validation as check
from tfp_bnn._memory import check_bytes
from tfp_bnn import ensembles


def _flat(variables) -> np.ndarray:
    """The variables' values as one float64 vector, in their order."""
    return np.concatenate([np.ravel(keras.ops.convert_to_numpy(v)).astype(np.float64)
                           for v in variables])


def _unflat(vector, variables):
    """`vector` [P] cut into arrays of the variables' shapes and dtypes."""
    arrays, start = [], 0
    for variable in variables:
        shape = tuple(int(d) for d in variable.shape)
        stop = start + math.prod(shape)
        arrays.append(np.asarray(vector[start:stop].reshape(shape), dtype=variable.dtype))
        start = stop
    return arrays


def batch_norm_layers(model):
    """The `keras.layers.BatchNormalization` layers of `model`, nested models included."""
    return [layer for layer in _keras_internals.flatten_layers(model, include_self=True)
            if isinstance(layer, keras.layers.BatchNormalization)]


def refresh_batch_norm(model, data, batch_size=None):
    """Sets each trainable BatchNormalization layer's moving statistics to those of `data`.

    One pass of `data` through `model` in training mode, as the paper does for every SWAG
    sample (its statistics belong to the weights they were collected with). For each batch
    the layers' momentum is set to 0, so a layer's moving mean and variance become that
    batch's moments, which are read and combined in float64 (Chan, Golub and LeVeque's
    pairwise update): after the pass `moving_mean` and `moving_variance` are the mean and the
    (population) variance of the layer's training-mode inputs over all of `data`, whatever
    `batch_size`. Upstream BatchNormalization layers normalise by their batch's statistics
    and Dropout drops, as in training. The layers' momentum is restored afterwards. Layers
    with `trainable=False` run in inference mode and keep their statistics.

    Args:
        model: a Keras model with BatchNormalization layers (renorm=False).
        data: inputs [N, ...] of the model (an array or tensor), N >= 1.
        batch_size: rows per call, None (default) for all N in one call.

    Returns:
        `model`, its moving statistics updated in place.

    Example:
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.BatchNormalization()])
    >>> data = np.array([[0.0, 1.0], [2.0, 5.0], [4.0, 3.0]], "float32")
    >>> layer = refresh_batch_norm(model, data, batch_size=2).layers[0]
    >>> np.asarray(layer.moving_mean), np.asarray(layer.moving_variance).round(4)
    (array([2., 3.], dtype=float32), array([2.6667, 2.6667], dtype=float32))
    """
    layers = [layer for layer in batch_norm_layers(model) if layer.trainable]
    for layer in layers:
        if getattr(layer, "renorm", False):
            raise ValueError(f"BatchNormalization '{layer.name}' uses renorm, whose moving "
                             "statistics cannot be recomputed here; use renorm=False.")
    count = check.integer("len(data)", int(data.shape[0]))
    batch_size = check.integer("batch_size", batch_size, allow_none=True) or count
    momenta = [layer.momentum for layer in layers]
    seen = 0
    means = [0.0] * len(layers)
    sums = [0.0] * len(layers)  # sum of squared deviations from the running mean
    try:
        for layer in layers:
            layer.momentum = 0.0
        for start in range(0, count, batch_size):
            batch = data[start:start + batch_size]
            rows = int(batch.shape[0])
            model(batch, training=True)
            total = seen + rows
            for index, layer in enumerate(layers):
                mean = keras.ops.convert_to_numpy(layer.moving_mean).astype(np.float64)
                variance = keras.ops.convert_to_numpy(layer.moving_variance).astype(np.float64)
                delta = mean - means[index]
                means[index] = means[index] + delta * rows / total
                sums[index] = sums[index] + variance * rows + delta ** 2 * seen * rows / total
            seen = total
    finally:
        for layer, momentum in zip(layers, momenta):
            layer.momentum = momentum
    for layer, mean, total in zip(layers, means, sums):
        layer.moving_mean.assign(np.asarray(mean, dtype=layer.moving_mean.dtype))
        layer.moving_variance.assign(np.asarray(total / count, dtype=layer.moving_variance.dtype))
    return model


@keras.saving.register_keras_serializable(package="tfp_bnn")
class SWAG(keras.callbacks.Callback):
    """Collects the SWAG posterior (Maddox et al. 2019) of a model's weights during `fit`.

    At the end of epoch `start_epoch` (0-based, as Keras passes epochs to callbacks: 0 is the
    first) and then every `collect_every` epochs, it reads the model's trainable weights as
    one float64 vector theta_i and updates the first and second moments and the last
    `max_rank` deviations (see the module docstring). Snapshots add up over several calls
    of `fit` (epochs are counted as `fit` counts them, `initial_epoch` included); `reset()`
    forgets them.

    The learning rate must be constant or cyclic from `start_epoch` on, and high enough for
    the iterates to explore (the paper's schedule: a decay to the SWA rate, then constant).
    The callback does not change it: pass the optimizer a schedule, e.g.
    `keras.optimizers.schedules.PiecewiseConstantDecay`.

    After training the callback holds `num_collected`, `mean` (theta_bar [P]),
    `diagonal_variance` (max(theta2_bar - theta_bar^2, 0): clamped at 0, as Maddox et al.
    do, because rounding can make the difference slightly negative) and
    `deviations` ([K, P], oldest first; D = deviations^T). It samples weights
    (`sample_vectors`, `sample_weights`), gives the SWA weights (`swa_weights`,
    `set_swa_weights`), and builds the SWAG predictive as a deep ensemble of sampled copies
    of the model (`predictive_model`).

    Args:
        start_epoch: int >= 0, the epoch at whose end the first snapshot is taken.
        collect_every: int >= 1, epochs between snapshots.
        max_rank: int >= 2, K, the deviations kept (the low-rank part's rank).
        diagonal_only: bool; SWAG-Diag: no deviations kept, samples from N(theta_bar,
            Sigma_diag).

    Example:
    >>> x = np.random.rand(64, 3).astype("float32")
    >>> y = x.sum(axis=1, keepdims=True)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(8, activation="relu"),
    ...                           keras.layers.Dense(2)])
    >>> model.compile(keras.optimizers.SGD(1e-2), tfp_bnn.losses.GaussianNLL())
    >>> swag = tfp_bnn.callbacks.SWAG(start_epoch=5, max_rank=5)
    >>> history = model.fit(x, y, epochs=15, batch_size=8, verbose=0, callbacks=[swag])
    >>> swag.num_collected, swag.deviations.shape
    (10, (5, 50))
    >>> prediction = tfp_bnn.predict.regression(swag.predictive_model(10), x, num_samples=10)
    """

    def __init__(self, start_epoch, collect_every=1, max_rank=20, diagonal_only=False):
        super().__init__()
        self.start_epoch = check.integer("start_epoch", start_epoch, minimum=0)
        self.collect_every = check.integer("collect_every", collect_every)
        self.max_rank = check.integer("max_rank", max_rank, minimum=2)
        self.diagonal_only = check.boolean("diagonal_only", diagonal_only)
        self.reset()

    def get_config(self):
        return {"start_epoch": self.start_epoch, "collect_every": self.collect_every,
                "max_rank": self.max_rank, "diagonal_only": self.diagonal_only}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def reset(self):
        """Forgets every snapshot."""
        self.num_collected = 0
        self._mean = self._second = self._ring = None
        self._written = 0  # deviations written to the ring, all time

    def on_train_begin(self, logs=None):
        # The moments and the deviations, float64, refused before the first step.
        size = sum(math.prod(w.shape) for w in self.model.trainable_weights)
        check_bytes(8 * size * (2 + (0 if self.diagonal_only else self.max_rank)),
                    f"SWAG's moments and {0 if self.diagonal_only else self.max_rank} "
                    f"deviations of {size:,} weights", "use a smaller max_rank (or "
                    "diagonal_only=True)")

    def on_epoch_end(self, epoch, logs=None):
        since = epoch - self.start_epoch
        if since >= 0 and since % self.collect_every == 0:
            self._collect()

    def _collect(self):
        theta = _flat(self.model.trainable_weights)
        n = self.num_collected
        if n == 0:
            self._mean, self._second = np.zeros_like(theta), np.zeros_like(theta)
            if not self.diagonal_only:
                self._ring = np.zeros((self.max_rank, theta.size))
        elif theta.size != self._mean.size:
            raise ValueError(f"SWAG holds snapshots of {self._mean.size:,} weights, but the "
                             f"model now has {theta.size:,} trainable weights; call reset() "
                             "before collecting from another model.")
        # Algorithm 1 as written (not Welford's update): its moments, in float64, lose
        # ~eps64 * theta^2 to cancellation in theta2_bar - theta_bar^2, far below the
        # variance of float32 weights that move.
        self._mean = (n * self._mean + theta) / (n + 1)
        self._second = (n * self._second + theta ** 2) / (n + 1)
        if not self.diagonal_only:
            self._ring[self._written % self.max_rank] = theta - self._mean
            self._written += 1
        self.num_collected = n + 1

    def _require(self, minimum, what):
        if self.num_collected == 0:
            raise ValueError(f"SWAG has collected no weights yet, so it cannot {what}: pass "
                             f"it to model.fit(callbacks=[...]) and train past start_epoch="
                             f"{self.start_epoch} (0-based).")
        if self.num_collected < minimum:
            raise ValueError(f"SWAG has collected {self.num_collected} snapshot; it needs at "
                             f"least {minimum} to {what} (train longer, or collect more "
                             "often with a smaller `collect_every`).")

    @property
    def mean(self):
        """theta_bar [P] float64, the SWA weights in `model.trainable_weights` order."""
        self._require(1, "give its mean")
        return self._mean.copy()

    @property
    def diagonal_variance(self):
        """max(theta2_bar - theta_bar^2, 0) [P] float64 (clamped at 0 as in the paper)."""
        self._require(1, "give its variance")
        return np.maximum(self._second - self._mean ** 2, 0.0)

    @property
    def deviations(self):
        """The last min(num_collected, max_rank) deviations [K, P], oldest first.

        Empty [0, P] for SWAG-Diag.
        """
        self._require(1, "give its deviations")
        if self.diagonal_only:
            return np.zeros((0, self._mean.size))
        if self._written <= self.max_rank:
            return self._ring[:self._written].copy()
        return np.roll(self._ring, -(self._written % self.max_rank), axis=0)

    def sample_vectors(self, num_samples, seed=None):
        """`num_samples` weight vectors drawn from the SWAG posterior.

        Args:
            num_samples: int >= 1.
            seed: int >= 0 for NumPy's generator, or None for fresh randomness.

        Returns:
            float64 [num_samples, P], each row in `model.trainable_weights` order.
        """
        num_samples = check.integer("num_samples", num_samples)
        seed = check.seed(seed, allow_none=True)
        self._require(2, "sample")
        rng = np.random.default_rng(seed)
        scale = np.sqrt(self.diagonal_variance)
        noise = rng.standard_normal((num_samples, self._mean.size))
        if self.diagonal_only:
            return self._mean + scale * noise
        deviations = self.deviations
        rank = deviations.shape[0]
        low_rank = rng.standard_normal((num_samples, rank)) @ deviations
        return (self._mean + scale * noise / math.sqrt(2.0)
                + low_rank / math.sqrt(2.0 * (rank - 1)))

    def sample_weights(self, seed=None):
        """One SWAG draw as arrays shaped like `model.trainable_weights` (in its dtypes).

        Args:
            seed: int >= 0, or None for fresh randomness; `sample_vectors(1, seed)[0]`.

        Returns:
            A list of NumPy arrays, one per trainable weight.
        """
        vector = self.sample_vectors(1, seed)[0]
        return _unflat(vector, self.model.trainable_weights)

    def swa_weights(self):
        """theta_bar, the SWA weights, shaped like `model.trainable_weights`.

        Returns:
            A list of NumPy arrays, one per trainable weight, in its dtype.
        """
        return _unflat(self.mean, self.model.trainable_weights)

    def _check_batch_norm(self, model, batch_norm_data):
        if batch_norm_layers(model):
            if batch_norm_data is None:
                raise ValueError(
                    f"The model has BatchNormalization layers, whose moving statistics "
                    "belong to the weights they were collected with: pass "
                    "`batch_norm_data=` (training inputs) to recompute them for the new "
                    "weights, as the paper does.")
            data = check.array("batch_norm_data", batch_norm_data)
            if data.ndim == 0 or len(data) == 0:
                raise ValueError(f"`batch_norm_data` must hold training inputs [N, ...] with "
                                 f"N >= 1, got shape {data.shape}.")
            return data
        if batch_norm_data is not None:
            raise ValueError("`batch_norm_data` is only for a model with BatchNormalization "
                             "layers; this one has none.")
        return None

    def set_swa_weights(self, batch_norm_data=None, batch_size=None):
        """Sets the model's trainable weights to theta_bar (SWA); the rest stay.

        Args:
            batch_norm_data: training inputs to recompute BatchNormalization statistics
                with (`refresh_batch_norm`); required for a model with such layers, refused
                for one without.
            batch_size: rows per call of that pass, None for all at once.

        Returns:
            The model, its weights set in place.
        """
        self._require(1, "set the SWA weights")
        data = self._check_batch_norm(self.model, batch_norm_data)
        for variable, value in zip(self.model.trainable_weights, self.swa_weights()):
            variable.assign(value)
        if data is not None:
            refresh_batch_norm(self.model, data, batch_size)
        return self.model

    def predictive_model(self, num_members, seed=0, batch_norm_data=None, batch_size=None):
        """The SWAG predictive: a deep ensemble of `num_members` sampled copies of the model.

        Member m is `keras.models.clone_model(model)` with the non-trainable weights of the
        model and the trainable weights of draw m of `sample_vectors(num_members, seed)`
        (then, for a model with BatchNormalization layers, its statistics recomputed on
        `batch_norm_data`). `tfp_bnn.predict.regression(pm, x, num_samples=num_members)`
        (or a multiple of it) and `.classification` give the mixture of the draws; the model
        saves, loads and exports as any `tfp_bnn.ensembles.deep_ensemble` (TensorFlow
        backend only for sampling, as deep ensembles are).

        Args:
            num_members: int >= 1, the SWAG draws.
            seed: int >= 0, seeds the draws.
            batch_norm_data: training inputs, see `set_swa_weights`.
            batch_size: rows per call when recomputing BatchNormalization statistics.

        Returns:
            An uncompiled `keras.Model` made by `tfp_bnn.ensembles.deep_ensemble`.
        """
        num_members = check.integer("num_members", num_members)
        seed = check.seed(seed)
        self._require(2, "build a predictive model")
        model = self.model
        # The draws (float64) and the members' weights.
        check_bytes(num_members * (8 * self._mean.size + 4 * model.count_params()),
                    f"SWAG's predictive model of {num_members:,} members",
                    "use fewer members")
        try:
            ensembles.check_members([model])
        except ValueError as error:
            raise ValueError(f"SWAG.predictive_model copies the model into a deep ensemble, "
                             f"which needs a functional or Sequential model: {error}") from None
        data = self._check_batch_norm(model, batch_norm_data)
        fixed = model.get_weights()
        members = []
        for draw in self.sample_vectors(num_members, seed):
            member = keras.models.clone_model(model)
            if isinstance(member, keras.Sequential):
                # As a functional model: a Sequential loaded from a .keras file calls its
                # first layer twice, and `deep_ensemble` then runs the loaded members one
                # by one instead of stacked (same function, not the same float32 ops).
                member = keras.Model(member.inputs[0], member.outputs[0], name=member.name)
            member.set_weights(fixed)
            for variable, value in zip(member.trainable_weights,
                                       _unflat(draw, model.trainable_weights)):
                variable.assign(value)
            if data is not None:
                refresh_batch_norm(member, data, batch_size)
            members.append(member)
        return ensembles.deep_ensemble(members, name=f"{model.name}_swag")
