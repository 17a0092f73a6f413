"""Export stored trajectories as chat-format datasets (JSONL / Parquet) that TRL and HF datasets read.

One row per trajectory::

    {"messages": [...OpenAI chat messages...], "tools": [...function schemas...],
     "reward": 1.0, "task_id": "...", "status": "ok", "id": "..."}

``tools`` is the trajectory's own ``tools`` (the schemas its policy was
offered), else what its run recorded (``start_run(run_id, {"tools": [...]})``),
else absent. Files are written under a temporary name and renamed into
place, so a failed export leaves no partial file.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from sparring import atomicfile
from sparring.errors import ConfigError, StoreError
from sparring.store.base import TrajectoryStore, TrajQuery
from sparring.trajectory import Trajectory


def chat_row(traj: Trajectory, tools: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One trajectory as a chat-format dataset row."""
    row: dict[str, Any] = {"messages": traj.messages}
    if tools:
        row["tools"] = tools
    row.update(reward=traj.reward, task_id=traj.task_id, status=traj.status, id=traj.id)
    return row


def _rows(store: TrajectoryStore, query: TrajQuery) -> Iterator[dict[str, Any]]:
    tools_by_run: dict[str, list[dict[str, Any]] | None] = {}
    for traj in store.iter_search(query):
        if traj.run_id not in tools_by_run:
            run = store.get_run(traj.run_id) if traj.run_id else None
            tools = (run or {}).get("config", {}).get("tools")
            tools_by_run[traj.run_id] = tools if isinstance(tools, list) else None
        yield chat_row(traj, traj.tools or tools_by_run[traj.run_id])


def _atomic_write(out_path: str | os.PathLike[str], write: Callable[[Path], int]) -> int:
    """Call ``write(tmp_path)`` and rename the result onto ``out_path``; clean up on any failure."""
    out = Path(out_path)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StoreError(f"cannot create the directory for {out}: {e.strerror}") from None
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory; give a file path")
    with atomicfile.replacing(out) as tmp:
        return write(tmp)


def export_jsonl(store: TrajectoryStore, query: TrajQuery, out_path: str | os.PathLike[str]) -> int:
    """Write every match of ``query`` as one JSON line; return how many were written."""

    def write(tmp: Path) -> int:
        n = 0
        f: IO[str]
        with open(tmp, "w", encoding="utf-8") as f:
            for row in _rows(store, query):
                # ensure_ascii: lone surrogates in model output must not break the whole file.
                f.write(json.dumps(row, ensure_ascii=True) + "\n")
                n += 1
            f.flush()
            os.fsync(f.fileno())
        return n

    return _atomic_write(out_path, write)


def export_parquet(store: TrajectoryStore, query: TrajQuery, out_path: str | os.PathLike[str]) -> int:
    """Write every match of ``query`` as a Parquet file; return how many rows were written.

    ``messages`` is a native list-of-struct column (what HF datasets write for
    chat data, absent keys as nulls) when Arrow can type it, else a JSON string
    per row; the file's ``sparring.messages`` metadata says which (``arrow`` or
    ``json``). ``tools`` (free-form JSON schemas) is always a JSON string or null.
    """
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("parquet export needs pyarrow: pip install 'sparring[parquet]'") from None

    def write(tmp: Path) -> int:
        rows = list(_rows(store, query))
        scalars = {
            "id": pa.array([r["id"] for r in rows], pa.string()),
            "task_id": pa.array([r["task_id"] for r in rows], pa.string()),
            "status": pa.array([r["status"] for r in rows], pa.string()),
            "reward": pa.array(
                [None if r["reward"] is None else float(r["reward"]) for r in rows], pa.float64()
            ),
            "tools": pa.array(
                [json.dumps(r["tools"], ensure_ascii=True) if "tools" in r else None for r in rows],
                pa.string(),
            ),
        }
        try:
            messages = pa.array([r["messages"] for r in rows])
            encoding = "arrow"
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):  # e.g. content both str and list
            messages = pa.array([json.dumps(r["messages"], ensure_ascii=True) for r in rows], pa.string())
            encoding = "json"
        table = pa.table({"messages": messages, **scalars})
        table = table.replace_schema_metadata({"sparring.messages": encoding})
        pq.write_table(table, tmp)
        return len(rows)

    return _atomic_write(out_path, write)
