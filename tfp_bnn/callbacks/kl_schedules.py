"""KL-weight schedules: the factor that multiplies 1/N at each training step.

A schedule maps (epoch, batch, steps_per_epoch) to a factor; `KLScheduler`
sets every variational layer's kl_weight to factor / N. Each schedule
averages to at most 1 over an epoch, so a factor of 1 is the plain ELBO.
"""

import math

import keras

from tfp_bnn import _validation as check
from tfp_bnn.config_objects import ConfigObject
from tfp_bnn.config_objects import resolve


@keras.saving.register_keras_serializable(package="tfp_bnn")
class KLSchedule(ConfigObject):
    """Base class of KL-weight schedules.

    A subclass implements `factor`; one whose factor depends on the position
    within an epoch sets `needs_steps_per_epoch = True`, and `KLScheduler`
    then refuses a `fit` whose number of steps per epoch is unknown. A
    subclass with constructor arguments returns them from `get_config` so
    that a model saved with the schedule in its callbacks' configs reloads.

    Example:
    >>> class HalfSchedule(KLSchedule):
    ...     def factor(self, epoch, batch, steps_per_epoch):
    ...         return 0.5
    >>> scheduler = tfp_bnn.callbacks.KLScheduler(1000, schedule=HalfSchedule())
    >>> scheduler.schedule.factor(epoch=0, batch=0, steps_per_epoch=10)
    0.5
    """

    needs_steps_per_epoch = False

    def factor(self, epoch, batch, steps_per_epoch):
        """The factor that multiplies 1/N at one training step.

        Args:
            epoch: 0-based epoch index.
            batch: 0-based batch index within the epoch.
            steps_per_epoch: batches per epoch (None when `fit` does not
                know it and the schedule does not need it).

        Returns:
            A float >= 0; the layers' kl_weight becomes factor / N.
        """
        raise NotImplementedError


@keras.saving.register_keras_serializable(package="tfp_bnn")
class ConstantSchedule(KLSchedule):
    """Factor 1 at every step: kl_weight = 1/N, the plain per-example ELBO.

    Example:
    >>> ConstantSchedule().factor(epoch=3, batch=7, steps_per_epoch=10)
    1.0
    """

    def factor(self, epoch, batch, steps_per_epoch):
        return 1.0


@keras.saving.register_keras_serializable(package="tfp_bnn")
class LinearWarmup(KLSchedule):
    """Factor rising linearly from 0 to 1 over `epochs` epochs, then 1.

    Deterministic warm-up lets the data term shape the network before the
    KL pulls the posterior towards the prior. The factor grows at every
    batch: step / (epochs * steps_per_epoch), step counted from 0.

    Args:
        epochs: positive number, the length of the warm-up in epochs
            (default 10); fractions of an epoch are allowed.

    Example:
    >>> warmup = LinearWarmup(epochs=2)
    >>> [warmup.factor(epoch, 0, steps_per_epoch=4) for epoch in range(4)]
    [0.0, 0.5, 1.0, 1.0]
    """

    needs_steps_per_epoch = True

    def __init__(self, epochs=10):
        self.epochs = check.positive("epochs", epochs)

    def factor(self, epoch, batch, steps_per_epoch):
        step = epoch * steps_per_epoch + batch
        return min(1.0, step / (self.epochs * steps_per_epoch))

    def get_config(self):
        return {"epochs": self.epochs}


@keras.saving.register_keras_serializable(package="tfp_bnn")
class CyclicalSchedule(KLSchedule):
    """Cyclical annealing (Fu et al., NAACL 2019).

    Training is split into cycles of `cycle_epochs`; within each, the factor
    rises linearly from 0 to 1 over the first `ramp_fraction` of the cycle
    and stays at 1 for the rest.

    Args:
        cycle_epochs: positive number, the length of one cycle in epochs
            (default 10).
        ramp_fraction: in (0, 1], the part of each cycle over which the
            factor rises from 0 to 1 (default 0.5).

    Example:
    >>> cyclical = CyclicalSchedule(cycle_epochs=2, ramp_fraction=0.5)
    >>> [cyclical.factor(epoch, 0, steps_per_epoch=2) for epoch in range(4)]
    [0.0, 1.0, 0.0, 1.0]
    """

    needs_steps_per_epoch = True

    def __init__(self, cycle_epochs=10, ramp_fraction=0.5):
        self.cycle_epochs = check.positive("cycle_epochs", cycle_epochs)
        self.ramp_fraction = check.number("ramp_fraction", ramp_fraction, low=0.0, high=1.0,
                                          low_open=True)

    def factor(self, epoch, batch, steps_per_epoch):
        cycle_steps = self.cycle_epochs * steps_per_epoch
        position = ((epoch * steps_per_epoch + batch) % cycle_steps) / cycle_steps
        return min(1.0, position / self.ramp_fraction)

    def get_config(self):
        return {"cycle_epochs": self.cycle_epochs, "ramp_fraction": self.ramp_fraction}


@keras.saving.register_keras_serializable(package="tfp_bnn")
class BlundellSchedule(KLSchedule):
    """Blundell et al.'s minibatch weights pi_i = 2^(M-i) / (2^M - 1).

    For batch i = 1..M of an epoch the KL of the minibatch objective is
    weighted by pi_i (sum 1 over the epoch): early batches carry most of the
    complexity cost, late ones are driven by the data. In the per-example
    form the factor is M * pi_i, which averages to 1 over the epoch. It is
    computed as 2^-i / (1 - 2^-M) so that large M does not overflow.

    Example:
    >>> blundell = BlundellSchedule()
    >>> [round(blundell.factor(0, batch, steps_per_epoch=3), 4) for batch in range(3)]
    [1.7143, 0.8571, 0.4286]
    """

    needs_steps_per_epoch = True

    def factor(self, epoch, batch, steps_per_epoch):
        m = steps_per_epoch
        i = batch + 1
        return m * math.ldexp(1.0, -i) / -math.expm1(-m * math.log(2.0))


SCHEDULES = {
    "constant": ConstantSchedule,
    "linear_warmup": LinearWarmup,
    "cyclical": CyclicalSchedule,
    "blundell": BlundellSchedule,
}


def get(identifier):
    """Resolves a schedule name, instance or serialized dict."""
    return resolve(identifier, KLSchedule, SCHEDULES, "schedule")
