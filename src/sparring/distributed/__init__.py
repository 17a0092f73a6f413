"""Executors: where rollouts run. :class:`LocalExecutor` plays samples in this process;
:class:`RayExecutor` keeps the scheduler here (the driver) and plays samples on one node actor per
machine, behind the same :class:`RolloutExecutor` seam."""

from sparring.distributed.executor import (
    LocalExecutor,
    RayExecutor,
    RayOptions,
    RolloutExecutor,
    check_executor,
    make_executor,
)

__all__ = ["LocalExecutor", "RayExecutor", "RayOptions", "RolloutExecutor", "check_executor", "make_executor"]
