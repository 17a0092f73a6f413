"""Shared by `sparring report` and `sparring traj view`: read trajectories out of a store for the
static pages, and a token decoder for their token traces when the policy's tokenizer is on disk."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore
from sparring.trajectory import Trajectory


def load_trajectories(store: Path, queries: Sequence[TrajQuery]) -> list[Trajectory]:
    """Every trajectory matching any query (newest first, each once); the store opened read-only."""
    s = SQLiteStore(store, readonly=True)
    try:
        seen: dict[str, Trajectory] = {}
        for q in queries:
            for t in s.search(q)[1]:
                seen.setdefault(t.id, t)
        return sorted(seen.values(), key=lambda t: -t.created_at)
    finally:
        s.close()


def run_summary(store: Path, run_id: str) -> dict[str, Any]:
    """The stored summary of a run (held-out numbers, alerts), or {} when the store has none."""
    if not store.is_file():
        return {}
    s = SQLiteStore(store, readonly=True)
    try:
        run = s.get_run(run_id) or {}
    finally:
        s.close()
    summary = run.get("summary")
    return summary if isinstance(summary, dict) else {}


def decoder(trajs: Sequence[Trajectory]) -> Callable[[int], str] | None:
    """id -> token text from the tokenizer of the first ``hf:PATH`` policy found on disk; else None."""
    for t in trajs:
        if t.policy.startswith("hf:") and t.traces:
            path = Path(t.policy[3:]) / "tokenizer.json"
            if path.is_file():
                with contextlib.suppress(Exception):
                    from tokenizers import Tokenizer

                    tok = Tokenizer.from_file(str(path))
                    return lambda i: tok.id_to_token(i) or f"<{i}>"
    return None
