"""What every layer with random weights or nodes and a KL term shares.

The variational layers (`BayesianLayer`) and the node-based layers
(`NodeLayer`) both own a seeded noise generator, a `kl_weight` held in a
non-trainable variable (so a `KLScheduler` can `.assign()` it inside a
compiled `fit`), a mean-mode switch `sampling` that `tfp_bnn.set_mean_mode`
turns, and the warning when training starts with `kl_weight` unset.
"""

import warnings

import keras
from keras import ops

from tfp_bnn import _validation
from tfp_bnn.layers._kl_tracking import KLTracking
from tfp_bnn.layers._tracing import flag


class StochasticLayer(KLTracking):
    """Mixin (before `keras.layers.Layer`) for layers that draw noise and add a KL.

    Call `_create_stochastic_state(kl_weight, seed)` in `__init__` after
    `Layer.__init__`; it validates both arguments.
    """

    # Has a `sampling` switch that tfp_bnn.set_mean_mode turns (tfp_bnn/modes.py).
    stochastic_layer = True

    def _create_stochastic_state(self, kl_weight, seed):
        """Sets `seed`, `seed_generator`, `kl_weight`, `sampling` and the KL tracker."""
        seed = _validation.seed(seed, allow_none=True)
        kl_weight = _validation.number("kl_weight", kl_weight, low=0.0, allow_none=True)
        self._initial_kl_weight = kl_weight
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.kl_weight = self.add_weight(
            name="kl_weight",
            shape=(),
            dtype="float32",
            initializer=keras.initializers.Constant(1.0 if kl_weight is None else kl_weight),
            trainable=False,
        )
        # 1.0: inference draws noise; 0.0: inference uses the posterior means.
        self.sampling = self.add_weight(
            name="sampling",
            shape=(),
            dtype="float32",
            initializer="ones",
            trainable=False,
        )
        self._create_kl_tracker()
        self._warned_unset_kl_weight = False

    def _noise_dtype(self):
        """The dtype in which the layer scales its noise."""
        return self.compute_dtype

    def _noise_scale(self, training):
        """None while training (full noise); at inference the `sampling` switch.

        Returning None rather than a constant 1 spares the training step a
        multiply over every weight and output, and its backward pass.
        """
        if training:
            return None
        if flag("force_mean"):
            return ops.convert_to_tensor(0.0, self._noise_dtype())
        return ops.cast(self.sampling, self._noise_dtype())

    def _warn_if_kl_weight_unset(self, training):
        """Warns once when training starts with the default kl_weight of 1.0."""
        if not training or self._initial_kl_weight is not None or self._warned_unset_kl_weight:
            return
        self._warned_unset_kl_weight = True
        if not getattr(self, "_kl_weight_managed", False):
            warnings.warn(
                f"Layer '{self.name}' trains with kl_weight=1.0 because none was "
                "given: the per-example objective needs kl_weight = 1/N. Pass "
                "kl_weight=1/N or use tfp_bnn.callbacks.KLScheduler(num_examples=N).",
                stacklevel=4,
            )
