"""Rows of a dataset file as published: JSON Lines, gzip-compressed JSON Lines or Parquet (HF exports).

Every importer reads its records through :func:`record_lines`, so each format accepts the same files.
"""

from __future__ import annotations

import json
from pathlib import Path

from sparring.errors import TaskError

GZIP_MAGIC = b"\x1f\x8b"
PARQUET_MAGIC = b"PAR1"


def parquet_rows(path: Path, data: bytes) -> list[tuple[int, str]]:
    """Each row of a Parquet file (an HF ``datasets`` export) as (row number, JSON text)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise TaskError(
            f"{path.name}: reading Parquet needs pyarrow: pip install 'sparring[parquet]'"
        ) from None
    import io

    try:
        rows = pq.read_table(io.BytesIO(data)).to_pylist()
    except Exception as e:  # noqa: BLE001 - pyarrow raises many kinds for a bad file
        raise TaskError(f"{path.name}: not a readable Parquet file ({e})") from None
    return [(n, json.dumps(r, default=str)) for n, r in enumerate(rows, start=1)]


def record_lines(path: Path) -> list[tuple[int, str]]:
    """(line or row number, JSON text) of a function-jsonl file as published: plain, gzip-compressed
    (``.jsonl.gz``, recognised by its magic bytes) or Parquet."""
    data = path.read_bytes()
    if data[:2] == GZIP_MAGIC:
        import gzip

        try:
            data = gzip.decompress(data)
        except (OSError, EOFError) as e:
            raise TaskError(f"{path.name}: a truncated or corrupt gzip file ({e})") from None
    if data[:4] == PARQUET_MAGIC:
        return parquet_rows(path, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TaskError(f"{path.name}: not UTF-8 text ({e.reason})") from None
    return list(enumerate(text.splitlines(), start=1))
