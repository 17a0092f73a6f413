"""The trajectory store: every rollout attempt, kept, searchable, exportable.

Public API: the :class:`TrajectoryStore` protocol, its query (:class:`TrajQuery`)
and the SQLite default (:class:`SQLiteStore`). Export and the failure-case
library are in ``store.export`` and ``store.failures``.
"""

from sparring.store.base import TrajectoryStore, TrajQuery
from sparring.store.sqlite import SQLiteStore

__all__ = ["SQLiteStore", "TrajQuery", "TrajectoryStore"]
