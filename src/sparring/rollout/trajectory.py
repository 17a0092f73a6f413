"""Re-export of :mod:`sparring.trajectory`, the trajectory record's owner (kept for old imports)."""

from sparring.trajectory import STATUSES, TRAINABLE_STATUSES, Status, TestCounts, ToolStep, Trajectory

__all__ = ["STATUSES", "TRAINABLE_STATUSES", "Status", "TestCounts", "ToolStep", "Trajectory"]
