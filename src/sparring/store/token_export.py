"""Export stored trajectories as exact token sequences (JSONL, Parquet, ``datasets.Dataset``).

The token-level counterpart of :mod:`sparring.store.export` (chat messages):
one row per episode segment (:mod:`sparring.store.tokens`)::

    {"id", "segment", "task_id", "status", "reward", "group_id", "policy_version",
     "prompt_ids": [...], "completion_ids": [...], "logprobs": [...] | null,
     "policy_mask": [...], "turns": [...], "mismatches": N}

``completion_ids`` holds the sampled and the environment-appended ids in
order, ``policy_mask`` tells them apart (TRL's ``env_mask``), ``logprobs`` is
the sampling policy's per token (0.0 on appended ones; null when a turn came
without). Every export reports how many turn boundaries did not line up
(``mismatches``): those are counted, never patched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from sparring.errors import ConfigError
from sparring.store.base import TrajectoryStore, TrajQuery
from sparring.store.export import _atomic_write
from sparring.store.tokens import token_rows


@dataclass
class TokenExport:
    """What an export wrote: rows (segments), trajectories, mismatched boundaries, sampled tokens."""

    rows: int = 0
    trajectories: int = 0
    mismatches: int = 0
    sampled_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return {"rows": self.rows, "trajectories": self.trajectories, "mismatches": self.mismatches,
                "sampled_tokens": self.sampled_tokens}  # fmt: skip


def iter_token_rows(
    store: TrajectoryStore, query: TrajQuery, stats: TokenExport | None = None
) -> Iterator[dict[str, Any]]:
    """Every segment row of every match of ``query``; ``stats`` (if given) is updated as rows go."""
    stats = stats if stats is not None else TokenExport()
    for traj in store.iter_search(query):
        rows, mismatches = token_rows(traj)
        stats.trajectories += 1
        stats.mismatches += mismatches
        for row in rows:
            stats.rows += 1
            stats.sampled_tokens += sum(row["policy_mask"])
            yield row


def export_tokens_jsonl(
    store: TrajectoryStore, query: TrajQuery, out_path: str | os.PathLike[str]
) -> TokenExport:
    """Write every segment row as one JSON line."""
    stats = TokenExport()

    def write(tmp: Path) -> int:
        f: IO[str]
        with open(tmp, "w", encoding="utf-8") as f:
            for row in iter_token_rows(store, query, stats):
                f.write(json.dumps(row, ensure_ascii=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return stats.rows

    _atomic_write(out_path, write)
    return stats


def _arrow_table(rows: list[dict[str, Any]]) -> Any:
    import pyarrow as pa

    ints = pa.list_(pa.int64())
    schema = pa.schema([
        ("id", pa.string()), ("segment", pa.int32()), ("task_id", pa.string()), ("status", pa.string()),
        ("reward", pa.float64()), ("group_id", pa.string()), ("policy_version", pa.int64()),
        ("prompt_ids", ints), ("completion_ids", ints), ("logprobs", pa.list_(pa.float64())),
        ("policy_mask", pa.list_(pa.int8())), ("turns", pa.list_(pa.int32())), ("mismatches", pa.int32()),
    ])  # fmt: skip
    return pa.Table.from_pylist(rows, schema=schema)


def export_tokens_parquet(
    store: TrajectoryStore, query: TrajQuery, out_path: str | os.PathLike[str]
) -> TokenExport:
    """Write every segment row to a Parquet file (native list columns)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ConfigError("parquet export needs pyarrow: pip install 'sparring[parquet]'") from None
    stats = TokenExport()

    def write(tmp: Path) -> int:
        pq.write_table(_arrow_table(list(iter_token_rows(store, query, stats))), tmp)
        return stats.rows

    _atomic_write(out_path, write)
    return stats


def tokens_dataset(store: TrajectoryStore, query: TrajQuery) -> tuple[Any, TokenExport]:
    """The segment rows as a ``datasets.Dataset`` (what TRL and HF trainers take), and the export stats."""
    try:
        import datasets
    except ImportError:
        raise ConfigError(
            "a datasets.Dataset needs the datasets package: pip install 'sparring[trl]'"
        ) from None
    stats = TokenExport()
    table = _arrow_table(list(iter_token_rows(store, query, stats)))
    return datasets.Dataset(table), stats
