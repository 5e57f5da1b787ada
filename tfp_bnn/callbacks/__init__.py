"""Callbacks for training variational networks."""

from tfp_bnn.callbacks.kl_schedules import BlundellSchedule
from tfp_bnn.callbacks.kl_schedules import ConstantSchedule
from tfp_bnn.callbacks.kl_schedules import CyclicalSchedule
from tfp_bnn.callbacks.kl_schedules import KLSchedule
from tfp_bnn.callbacks.kl_schedules import LinearWarmup
from tfp_bnn.callbacks.kl_scheduler import KLScheduler
from tfp_bnn.callbacks.kl_scheduler import consolidate_kl_logs

__all__ = [
    "BlundellSchedule",
    "ConstantSchedule",
    "CyclicalSchedule",
    "KLSchedule",
    "KLScheduler",
    "LinearWarmup",
    "consolidate_kl_logs",
]
