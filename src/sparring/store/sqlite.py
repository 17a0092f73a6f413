"""The embedded trajectory store: one SQLite file in WAL mode.

Layout (schema v3; a v1 or v2 store is upgraded in place on its first writable open, and read as it is
when opened read-only)::

    schema_version  one row: version, format marker, text-index kind, created_at
    runs            run_id PK, config json, summary json, started_at, finished_at
    trajectories    seq INTEGER PK (stable rowid), id UNIQUE, the indexed columns
                    (run_id, task_id, family, status, reward, policy,
                    policy_version, judge_version, task_digest, created_at,
                    attempts, flags json); ``record`` is '' (v1 kept the JSON here);
                    v3: ``parent_id`` and ``branch_turn`` of a forked branch
                    (NULL for a root), indexed by parent
    traj_records    seq PK -> the full Trajectory JSON. Kept out of ``trajectories``
                    so that table stays a few MB at 100,000 rows and metadata
                    filters and counts never page through the records
    traj_flags      (flag, seq) PK WITHOUT ROWID: one row per judge flag, so a flag
                    search is an index range scan, not a JSON scan of every row
    traj_text       rowid = trajectories.seq; body = message text, tool-call
                    arguments and full tool outputs. An FTS5 table (trigram
                    tokenizer: case-insensitive substring search) where SQLite
                    has it, else a plain table searched with LIKE (same answers,
                    slower).

Every write is one ``BEGIN IMMEDIATE`` transaction, so writers in several
processes queue on ``busy_timeout`` instead of failing on lock upgrades. One
connection per store guarded by a lock makes a store safe to share between
threads. A new file is built under a temporary name and hard-linked into
place, so concurrent first opens never see a half-initialised store, and an
existing file is validated through a read-only connection before anything is
written, so opening a file that is not a store never changes it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sparring.errors import StoreError
from sparring.store.base import TrajQuery
from sparring.store.sqlite_schema import (
    BATCH_MAX,
    SCHEMA,
    SCHEMA_VERSION,
    SQLITE_MAGIC,
    STORE_FORMAT,
    UPSERT,
    V2_SCHEMA,
    V3_COLUMNS,
    V3_INDEX,
    WALK_INDEX_ABOVE,
    like_pattern,
    phrase,
    searchable_text,
)
from sparring.trajectory import Trajectory

__all__ = ["SCHEMA_VERSION", "STORE_FORMAT", "SQLiteStore", "searchable_text"]


class SQLiteStore:
    """A :class:`~sparring.store.base.TrajectoryStore` in one SQLite file.

    ``readonly=True`` never creates or writes anything (for search/show/export);
    a missing path is then a StoreError instead of a new empty store.
    """

    def __init__(self, path: str | os.PathLike[str], *, readonly: bool = False, busy_timeout_s: float = 30.0):
        self.path = Path(path)
        self.readonly = readonly
        self._busy_timeout_s = busy_timeout_s
        self._lock = threading.RLock()
        if not self.path.exists():
            if readonly:
                raise StoreError(
                    f"no trajectory store at {self.path} (write one with `sparring rollout --store`)"
                )
            self._create()
        self.text_index = self._validate()
        self._conn: sqlite3.Connection | None = self._connect()

    # -- opening ---------------------------------------------------------------------------------

    def _raw_connect(self, target: Path, *, readonly: bool) -> sqlite3.Connection:
        if readonly:
            uri = target.resolve().as_uri() + "?mode=ro"
            conn = sqlite3.connect(
                uri, uri=True, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        else:
            conn = sqlite3.connect(
                target, timeout=self._busy_timeout_s, isolation_level=None, check_same_thread=False
            )
        conn.execute(f"PRAGMA busy_timeout={int(self._busy_timeout_s * 1000)}")
        return conn

    def _create(self) -> None:
        """Build the schema under a temporary name, then link it into place (first creator wins)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the directory for {self.path}: {e.strerror}") from None
        tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex[:12]}.init")
        try:
            conn = self._raw_connect(tmp, readonly=False)
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.executescript(SCHEMA)
                kind = self._create_text_index(conn)
                conn.execute(
                    "INSERT INTO schema_version VALUES (?, ?, ?, ?)",
                    (SCHEMA_VERSION, STORE_FORMAT, kind, time.time()),
                )
            finally:
                conn.close()
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass  # another process created the store first: use theirs
            except OSError:
                if not self.path.exists():  # a filesystem without hard links
                    os.replace(tmp, self.path)
        except sqlite3.Error as e:
            raise StoreError(f"cannot create a trajectory store at {self.path}: {e}") from None
        except OSError as e:
            raise StoreError(f"cannot create a trajectory store at {self.path}: {e.strerror}") from None
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                Path(f"{tmp}{suffix}").unlink(missing_ok=True)

    @staticmethod
    def _create_text_index(conn: sqlite3.Connection) -> str:
        """Create ``traj_text``; return its kind (``fts5-trigram`` or ``like``)."""
        # Only the trigram tokenizer (SQLite >= 3.34) answers substring queries like LIKE does;
        # a word-tokenised FTS table would give different answers, so without it we use LIKE.
        try:
            conn.execute("CREATE VIRTUAL TABLE traj_text USING fts5(body, tokenize='trigram')")
            return "fts5-trigram"
        except sqlite3.OperationalError:
            pass
        conn.execute("CREATE TABLE traj_text (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        return "like"

    def _validate(self) -> str:
        """Check, without writing, that the file is a store this version can read; return its text index."""
        p = self.path
        if p.is_dir():
            raise StoreError(f"{p} is a directory, not a trajectory store")
        try:
            with open(p, "rb") as f:
                head = f.read(len(SQLITE_MAGIC))
        except OSError as e:
            raise StoreError(f"cannot read {p}: {e.strerror}") from None
        if head != SQLITE_MAGIC:
            raise StoreError(f"{p} is not a Sparring trajectory store (not an SQLite database)")
        try:
            conn = self._raw_connect(p, readonly=True)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open {p}: {e}") from None
        try:
            row = conn.execute("SELECT version, format, text_index FROM schema_version").fetchone()
        except sqlite3.DatabaseError as e:
            if "no such table" in str(e) or "no such column" in str(e):
                raise StoreError(f"{p} is an SQLite database but not a Sparring trajectory store") from None
            raise StoreError(f"{p} is not a readable trajectory store: {e}") from None
        finally:
            conn.close()
        if row is None or row[1] != STORE_FORMAT:
            raise StoreError(f"{p} is an SQLite database but not a Sparring trajectory store")
        if int(row[0]) > SCHEMA_VERSION:
            raise StoreError(
                f"{p} has store schema v{row[0]}, newer than this sparring's v{SCHEMA_VERSION}: upgrade sparring"
            )
        self.schema_version = int(row[0])
        return str(row[2])

    def _upgrade(self, conn: sqlite3.Connection) -> None:
        """v1 -> v2: the flags join table (backfilled from the JSON column) and the newest-first index;
        v2 -> v3: the fork-tree columns (NULL: a store written before forks holds only roots)."""
        conn.execute("BEGIN IMMEDIATE")
        try:
            (version,) = conn.execute("SELECT version FROM schema_version").fetchone()
            if int(version) < 2:
                for stmt in filter(str.strip, V2_SCHEMA.split(";")):
                    conn.execute(stmt)
                conn.execute(
                    "CREATE INDEX IF NOT EXISTS ix_traj_newest ON trajectories(created_at DESC, seq DESC)"
                )
                conn.execute("CREATE INDEX IF NOT EXISTS ix_traj_run_status ON trajectories(run_id, status)")
                conn.execute(
                    "INSERT OR IGNORE INTO traj_flags(flag, seq) "
                    "SELECT f.value, t.seq FROM trajectories AS t, json_each(t.flags) AS f"
                )
                conn.execute(
                    "INSERT OR REPLACE INTO traj_records(seq, record) SELECT seq, record FROM trajectories"
                )
                conn.execute("UPDATE trajectories SET record = ''")
                conn.execute("UPDATE schema_version SET version = 2")
            if int(version) < 3:
                have = {row[1] for row in conn.execute("PRAGMA table_info(trajectories)")}
                for name, kind in V3_COLUMNS:
                    if name not in have:
                        conn.execute(f"ALTER TABLE trajectories ADD COLUMN {name} {kind}")
                conn.execute(V3_INDEX)
                conn.execute("UPDATE schema_version SET version = 3")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        self.schema_version = SCHEMA_VERSION

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = self._raw_connect(self.path, readonly=self.readonly)
            if self.readonly:
                conn.execute("PRAGMA query_only=1")
            else:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                if self.schema_version < SCHEMA_VERSION:
                    self._upgrade(conn)
            conn.execute("PRAGMA cache_size=-65536")  # 64 MiB page cache: searches touch indexes, not records
            return conn
        except sqlite3.Error as e:
            raise StoreError(f"cannot open the trajectory store {self.path}: {e}") from None

    # -- plumbing --------------------------------------------------------------------------------

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._conn is None:
                raise StoreError(f"the trajectory store {self.path} is closed")
            try:
                yield self._conn
            except sqlite3.Error as e:
                raise StoreError(f"trajectory store {self.path}: {e}") from None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: all of the body is written, or none of it."""
        if self.readonly:
            raise StoreError(f"the trajectory store {self.path} was opened read-only")
        with self._read() as conn:
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

    @property
    def _record(self) -> str:
        """SQL for a row's record JSON (``t`` = trajectories)."""
        if self.schema_version >= 2:
            return "(SELECT r.record FROM traj_records AS r WHERE r.seq = t.seq)"
        return "t.record"  # a v1 store opened read-only

    def _decode(self, record: str) -> Trajectory:
        try:
            return Trajectory.model_validate(json.loads(record))
        except (ValueError, ValidationError) as e:
            first = str(e).splitlines()[0]
            raise StoreError(f"corrupt trajectory record in {self.path}: {first}") from None

    # -- trajectories ----------------------------------------------------------------------------

    @staticmethod
    def _row(traj: Trajectory) -> tuple[tuple[Any, ...], str, str]:
        try:
            # ensure_ascii keeps lone surrogates and NULs exact through the JSON text.
            record = json.dumps(traj.model_dump(mode="json"), ensure_ascii=True, separators=(",", ":"))
        except (TypeError, ValueError) as e:
            raise StoreError(f"cannot serialise trajectory {traj.id}: {e}") from None
        row = (
            traj.id, traj.run_id, traj.task_id, traj.family, traj.status, traj.reward, traj.policy,
            traj.policy_version, traj.judge_version, traj.task_digest, traj.created_at, traj.attempts,
            json.dumps(traj.flags, ensure_ascii=True), "", traj.parent_id, traj.branch_turn,
        )  # fmt: skip
        return row, record, searchable_text(traj)

    def _put_in(
        self, conn: sqlite3.Connection, traj: Trajectory, row: tuple[Any, ...], record: str, body: str
    ) -> None:
        conn.execute(UPSERT, row)
        (seq,) = conn.execute("SELECT seq FROM trajectories WHERE id = ?", (traj.id,)).fetchone()
        conn.execute("INSERT OR REPLACE INTO traj_records(seq, record) VALUES (?, ?)", (seq, record))
        conn.execute("DELETE FROM traj_text WHERE rowid = ?", (seq,))
        conn.execute("INSERT INTO traj_text(rowid, body) VALUES (?, ?)", (seq, body))
        conn.execute("DELETE FROM traj_flags WHERE seq = ?", (seq,))
        if traj.flags:
            conn.executemany(
                "INSERT OR IGNORE INTO traj_flags(flag, seq) VALUES (?, ?)", [(f, seq) for f in traj.flags]
            )

    def put(self, traj: Trajectory) -> None:
        """Insert or replace ``traj`` (by id), its metadata columns, flags and text index entry."""
        self.put_many([traj])

    def put_many(self, trajs: list[Trajectory]) -> None:
        """Write many trajectories in one transaction: all of them are stored, or none."""
        rows = [(t, *self._row(t)) for t in trajs]  # serialise first: a bad record writes nothing
        if not rows:
            return
        with self._write() as conn:
            for traj, row, record, body in rows:
                self._put_in(conn, traj, row, record, body)

    def statuses(self, ids: list[str]) -> dict[str, tuple[str, int]]:
        """``{id: (status, attempts)}`` of those ``ids`` that are stored (for resuming a run)."""
        out: dict[str, tuple[str, int]] = {}
        for i in range(0, len(ids), BATCH_MAX):
            chunk = ids[i : i + BATCH_MAX]
            with self._read() as conn:
                for tid, status, attempts in conn.execute(
                    f"SELECT id, status, attempts FROM trajectories WHERE id IN ({', '.join('?' * len(chunk))})",
                    chunk,
                ):
                    out[tid] = (status, int(attempts))
        return out

    def children(self, traj_id: str) -> list[Trajectory]:
        """The branches forked from ``traj_id`` (by branch turn, then id); none in a store older than v3."""
        if self.schema_version < 3:
            return []
        with self._read() as conn:
            rows = conn.execute(
                f"SELECT {self._record} FROM trajectories AS t WHERE t.parent_id = ? ORDER BY t.branch_turn, t.id",
                (traj_id,),
            ).fetchall()
        return [self._decode(r[0]) for r in rows]

    def get(self, traj_id: str) -> Trajectory:
        with self._read() as conn:
            row = conn.execute(
                f"SELECT {self._record} FROM trajectories AS t WHERE t.id = ?", (traj_id,)
            ).fetchone()
        if row is None:
            raise StoreError(f"no trajectory {traj_id} in {self.path}")
        return self._decode(row[0])

    def resolve_id(self, ref: str) -> str:
        """The id of the one trajectory whose id is ``ref`` or starts with it; StoreError if none or
        several do (the error says how many)."""
        with self._read() as conn:
            if conn.execute("SELECT 1 FROM trajectories WHERE id = ?", (ref,)).fetchone():
                return ref
            rows = conn.execute(
                "SELECT id FROM trajectories WHERE substr(id, 1, ?) = ? LIMIT 11", (len(ref), ref)
            ).fetchall()
        if not ref or not rows:
            raise StoreError(f"no trajectory {ref} in {self.path} (`sparring traj search` lists the ids)")
        if len(rows) > 1:
            many = "more than 10" if len(rows) > 10 else str(len(rows))
            raise StoreError(
                f"id prefix {ref} is ambiguous in {self.path}: {many} trajectories match; give more characters"
            )
        return str(rows[0][0])

    def drop_run_after(self, run_id: str, created_after: float) -> int:
        """Delete ``run_id``'s trajectories created after ``created_after`` (what an interrupted
        iteration left: a resumed run redoes it); returns how many went."""
        with self._write() as conn:
            seqs = [r[0] for r in conn.execute(
                "SELECT seq FROM trajectories WHERE run_id = ? AND created_at > ?", (run_id, created_after)
            ).fetchall()]  # fmt: skip
            for seq in seqs:
                conn.execute("DELETE FROM traj_records WHERE seq = ?", (seq,))
                conn.execute("DELETE FROM traj_text WHERE rowid = ?", (seq,))
                conn.execute("DELETE FROM traj_flags WHERE seq = ?", (seq,))
                conn.execute("DELETE FROM trajectories WHERE seq = ?", (seq,))
        return len(seqs)

    def count(self) -> int:
        with self._read() as conn:
            return int(conn.execute("SELECT count(*) FROM trajectories").fetchone()[0])

    def _where(self, q: TrajQuery, conn: sqlite3.Connection) -> tuple[str, list[Any], int | None]:
        """SQL WHERE over ``trajectories AS t``, its parameters, and how many rows the text filter
        matched (None without a text filter answered by the index)."""
        clauses: list[str] = []
        params: list[Any] = []
        for column in ("task_id", "family", "status", "policy", "judge_version", "run_id"):
            value = getattr(q, column)
            if value is not None:
                clauses.append(f"t.{column} = ?")
                params.append(value)
        if q.min_reward is not None:
            clauses.append("t.reward >= ?")
            params.append(q.min_reward)
        if q.max_reward is not None:
            clauses.append("t.reward <= ?")
            params.append(q.max_reward)
        if q.flag is not None:
            if self.schema_version >= 2:
                clauses.append("t.seq IN (SELECT seq FROM traj_flags WHERE flag = ?)")
            else:  # a v1 store opened read-only: no join table
                clauses.append("EXISTS (SELECT 1 FROM json_each(t.flags) AS f WHERE f.value = ?)")
            params.append(q.flag)
        n_text = None
        if q.text:
            clause, n_text = self._text_clause(q.text, params, conn)
            clauses.append(clause)
        return (" WHERE " + " AND ".join(clauses)) if clauses else "", params, n_text

    def _text_clause(self, text: str, params: list[Any], conn: sqlite3.Connection) -> tuple[str, int | None]:
        """Substring match: MATCH where the index can answer it, LIKE otherwise (same semantics).

        The index is asked once (its row ids come back as one comma-joined
        string: no Python object per match) and the ids are passed on as a JSON
        array, so a search's count and page do not each pay for the phrase match.
        """
        if self.text_index == "fts5-trigram" and len(text) >= 3:
            (joined,) = conn.execute(
                "SELECT group_concat(rowid) FROM traj_text WHERE traj_text MATCH ?", (phrase(text),)
            ).fetchone()
            joined = joined or ""
            params.append(f"[{joined}]")
            return "t.seq IN (SELECT value FROM json_each(?))", (joined.count(",") + 1 if joined else 0)
        params.append(like_pattern(text))
        return "t.seq IN (SELECT rowid FROM traj_text WHERE body LIKE ? ESCAPE '\\')", None

    def _page_seqs(
        self, conn: sqlite3.Connection, where: str, params: list[Any], q: TrajQuery, n_text: int | None = None
    ) -> list[int]:
        # Many text matches: walk the newest-first index and stop after the page, instead of
        # sorting every match (the planner cannot know how many ids the JSON array holds).
        hint = " INDEXED BY ix_traj_newest" if n_text is not None and n_text > WALK_INDEX_ABOVE else ""
        sql = (
            f"SELECT t.seq FROM trajectories AS t{hint}{where} "
            "ORDER BY t.created_at DESC, t.seq DESC LIMIT ? OFFSET ?"
        )
        limit = -1 if q.limit is None else q.limit
        return [r[0] for r in conn.execute(sql, [*params, limit, q.offset])]

    def _matching_seqs(self, conn: sqlite3.Connection, q: TrajQuery) -> list[int]:
        where, params, n_text = self._where(q, conn)
        return self._page_seqs(conn, where, params, q, n_text)

    def _records(self, conn: sqlite3.Connection, seqs: list[int]) -> dict[int, str]:
        """Records by seq, fetched only for the rows asked for (never for every match)."""
        out: dict[int, str] = {}
        for i in range(0, len(seqs), BATCH_MAX):
            chunk = seqs[i : i + BATCH_MAX]
            out.update(
                conn.execute(
                    f"SELECT t.seq, {self._record} FROM trajectories AS t WHERE t.seq IN ({', '.join('?' * len(chunk))})",
                    chunk,
                ).fetchall()
            )
        return out

    def search(self, query: TrajQuery) -> tuple[int, list[Trajectory]]:
        with self._read() as conn:
            conn.execute("BEGIN")  # one snapshot for the count and the page
            try:
                where, params, n_text = self._where(query, conn)
                if n_text is not None and len(params) == 1:  # text is the only filter: the index counted
                    total = n_text
                else:
                    total = int(
                        conn.execute(f"SELECT count(*) FROM trajectories AS t{where}", params).fetchone()[0]
                    )
                seqs = self._page_seqs(conn, where, params, query, n_text) if total else []
                records = self._records(conn, seqs)
            finally:
                conn.execute("COMMIT")
        return total, [self._decode(records[s]) for s in seqs if s in records]

    def iter_search(self, query: TrajQuery, batch_size: int = 256) -> Iterator[Trajectory]:
        """Matches as of the call, in search order, loaded ``batch_size`` records at a time."""
        with self._read() as conn:
            seqs = self._matching_seqs(conn, query)
        step = max(1, min(batch_size, BATCH_MAX))
        for i in range(0, len(seqs), step):
            chunk = seqs[i : i + step]
            with self._read() as conn:
                rows = self._records(conn, chunk)
            for seq in chunk:
                if seq in rows:
                    yield self._decode(rows[seq])

    # -- runs ------------------------------------------------------------------------------------

    def start_run(self, run_id: str, config: dict[str, Any]) -> None:
        """Record a run and its config; starting the same run again updates its config."""
        cfg = json.dumps(config, default=str, ensure_ascii=True)
        with self._write() as conn:
            conn.execute(
                "INSERT INTO runs(run_id, config, started_at) VALUES (?, ?, ?) "
                "ON CONFLICT(run_id) DO UPDATE SET config = excluded.config",
                (run_id, cfg, time.time()),
            )

    def finish_run(self, run_id: str, summary: dict[str, Any]) -> None:
        """Record a run's summary (a run never started is recorded with an empty config)."""
        doc = json.dumps(summary, default=str, ensure_ascii=True)
        now = time.time()
        with self._write() as conn:
            conn.execute(
                "INSERT INTO runs(run_id, config, summary, started_at, finished_at) VALUES (?, '{}', ?, ?, ?) "
                "ON CONFLICT(run_id) DO UPDATE SET summary = excluded.summary, finished_at = excluded.finished_at",
                (run_id, doc, now, now),
            )

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self._read() as conn:
            row = conn.execute(
                "SELECT run_id, config, summary, started_at, finished_at FROM runs WHERE run_id = ?",
                (run_id,),
            ).fetchone()
        if row is None:
            return None
        return {
            "run_id": row[0],
            "config": json.loads(row[1]),
            "summary": json.loads(row[2]) if row[2] is not None else None,
            "started_at": row[3],
            "finished_at": row[4],
        }

    # -- lifecycle -------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        mode = "ro" if self.readonly else "rw"
        return f"SQLiteStore({str(self.path)!r}, {mode}, text_index={self.text_index!r})"
