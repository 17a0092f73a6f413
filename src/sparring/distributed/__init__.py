"""Executors: where rollouts run. :class:`LocalExecutor` runs the scheduler in this process;
the Ray executor (planned) runs it on other nodes behind the same :class:`RolloutExecutor` seam."""

from sparring.distributed.executor import LocalExecutor, RolloutExecutor, ray_executor

__all__ = ["LocalExecutor", "RolloutExecutor", "ray_executor"]
