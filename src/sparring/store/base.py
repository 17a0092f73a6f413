"""The trajectory store protocol and its query record.

Every rollout attempt is written to a store before it is reported, so the
store is the system's memory: search it, replay from it, export it for SFT.
Writes are idempotent by trajectory id (writing the same id again replaces the
record), so retried writers never duplicate.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from sparring.trajectory import Status, Trajectory


class TrajQuery(BaseModel):
    """Filters for :meth:`TrajectoryStore.search`; every ``None`` filter matches everything."""

    model_config = ConfigDict(extra="forbid")

    task_id: str | None = Field(None, description="Exact task id.")
    family: str | None = Field(None, description="Exact task family.")
    status: Status | None = Field(None, description="Final rollout status.")
    min_reward: float | None = Field(None, description="Reward >= this.")
    max_reward: float | None = Field(None, description="Reward <= this.")
    flag: str | None = Field(None, description="Trajectories carrying this judge flag.")
    policy: str | None = Field(None, description="Exact policy spec (e.g. `oracle`).")
    judge_version: str | None = Field(None, description="Exact judge version.")
    run_id: str | None = Field(None, description="Exact run id.")
    text: str | None = Field(
        None, description="Substring over message text, tool-call arguments and full tool outputs."
    )
    limit: int | None = Field(50, ge=0, description="Page size; None = no limit.")
    offset: int = Field(0, ge=0, description="Matches to skip (newest first).")


@runtime_checkable
class TrajectoryStore(Protocol):
    """Where trajectories live. Results are ordered newest first (``created_at`` descending)."""

    def put(self, traj: Trajectory) -> None:
        """Write one trajectory in a single transaction; an existing id is replaced."""
        ...

    def get(self, traj_id: str) -> Trajectory:
        """The trajectory with this id; StoreError when absent."""
        ...

    def children(self, traj_id: str) -> list[Trajectory]:
        """The branches forked from ``traj_id`` (``parent_id`` = it), by branch turn."""
        ...

    def search(self, query: TrajQuery) -> tuple[int, list[Trajectory]]:
        """(total number of matches, the requested page of them)."""
        ...

    def iter_search(self, query: TrajQuery, batch_size: int = 256) -> Iterator[Trajectory]:
        """Every match of ``query`` (honouring limit/offset), fetched in batches, for exports."""
        ...

    def count(self) -> int:
        """How many trajectories are stored."""
        ...

    def start_run(self, run_id: str, config: dict[str, Any]) -> None:
        """Record that a run started with this config (idempotent)."""
        ...

    def finish_run(self, run_id: str, summary: dict[str, Any]) -> None:
        """Record a run's summary when it ends."""
        ...

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        """``{run_id, config, summary, started_at, finished_at}`` or None if unknown."""
        ...

    def close(self) -> None:
        """Release the store's connections; further calls raise StoreError."""
        ...
