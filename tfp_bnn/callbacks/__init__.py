"""Callbacks for training variational networks."""

from tfp_bnn.callbacks.atomic_backup_and_restore import AtomicBackupAndRestore
from tfp_bnn.callbacks.divergence_guard import DivergenceGuard
from tfp_bnn.callbacks.divergence_guard import TrainingDiverged
from tfp_bnn.callbacks.kl_schedules import BlundellSchedule
from tfp_bnn.callbacks.kl_schedules import ConstantSchedule
from tfp_bnn.callbacks.kl_schedules import CyclicalSchedule
from tfp_bnn.callbacks.kl_schedules import KLSchedule
from tfp_bnn.callbacks.kl_schedules import LinearWarmup
from tfp_bnn.callbacks.kl_scheduler import KLScheduler
from tfp_bnn.callbacks.kl_scheduler import consolidate_kl_logs
from tfp_bnn.callbacks.reset_covariance import ResetCovariance
from tfp_bnn.callbacks.swag import SWAG

__all__ = [
    "AtomicBackupAndRestore",
    "BlundellSchedule",
    "ConstantSchedule",
    "CyclicalSchedule",
    "DivergenceGuard",
    "KLSchedule",
    "KLScheduler",
    "LinearWarmup",
    "ResetCovariance",
    "SWAG",
    "TrainingDiverged",
    "consolidate_kl_logs",
]
