"""The SQLite store's schema (see :mod:`sparring.store.sqlite` for the layout) and its text index input."""

from __future__ import annotations

from sparring.trajectory import Trajectory

SCHEMA_VERSION = 3
STORE_FORMAT = "sparring-trajectory-store"
SQLITE_MAGIC = b"SQLite format 3\x00"
WALK_INDEX_ABOVE = 5000  # text matches above which a page walks the newest-first index
BATCH_MAX = 500  # below SQLITE_MAX_VARIABLE_NUMBER on old builds (999)

COLUMNS = (
    "id",
    "run_id",
    "task_id",
    "family",
    "status",
    "reward",
    "policy",
    "policy_version",
    "judge_version",
    "task_digest",
    "created_at",
    "attempts",
    "flags",
    "record",
    "parent_id",
    "branch_turn",
)
INDEXED = (
    "run_id",
    "task_id",
    "family",
    "status",
    "reward",
    "policy",
    "judge_version",
    "task_digest",
    "created_at",
)

V2_SCHEMA = """
CREATE TABLE IF NOT EXISTS traj_records (seq INTEGER PRIMARY KEY, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS traj_flags (flag TEXT NOT NULL, seq INTEGER NOT NULL, PRIMARY KEY (flag, seq))
    WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS ix_flags_seq ON traj_flags(seq);
"""

V3_COLUMNS = (("parent_id", "TEXT"), ("branch_turn", "INTEGER"))
"""Added in v3: the fork tree (a branch's parent trajectory and the turn it was forked at)."""
V3_INDEX = "CREATE INDEX IF NOT EXISTS ix_traj_parent ON trajectories(parent_id) WHERE parent_id IS NOT NULL;"

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL, format TEXT NOT NULL, text_index TEXT NOT NULL, created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, config TEXT NOT NULL DEFAULT '{{}}', summary TEXT,
    started_at REAL, finished_at REAL
);
CREATE TABLE IF NOT EXISTS trajectories (
    seq INTEGER PRIMARY KEY,
    id TEXT NOT NULL UNIQUE,
    run_id TEXT NOT NULL, task_id TEXT NOT NULL, family TEXT NOT NULL, status TEXT NOT NULL,
    reward REAL, policy TEXT NOT NULL, policy_version INTEGER NOT NULL, judge_version TEXT NOT NULL,
    task_digest TEXT NOT NULL, created_at REAL NOT NULL, attempts INTEGER NOT NULL,
    flags TEXT NOT NULL, record TEXT NOT NULL, parent_id TEXT, branch_turn INTEGER
);
{"".join(f"CREATE INDEX IF NOT EXISTS ix_traj_{c} ON trajectories({c});" for c in INDEXED)}
CREATE INDEX IF NOT EXISTS ix_traj_newest ON trajectories(created_at DESC, seq DESC);
CREATE INDEX IF NOT EXISTS ix_traj_run_status ON trajectories(run_id, status);
{V2_SCHEMA}
{V3_INDEX}
"""

UPSERT = (
    f"INSERT INTO trajectories({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))}) "
    f"ON CONFLICT(id) DO UPDATE SET {', '.join(f'{c}=excluded.{c}' for c in COLUMNS[1:])}"
)


def searchable_text(traj: Trajectory) -> str:
    """What ``--text`` searches: message text, tool-call names/arguments, full tool outputs, errors."""
    parts: list[str] = []
    for m in traj.messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        for call in m.get("tool_calls") or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                parts.extend(str(fn.get(k) or "") for k in ("name", "arguments"))
    for step in traj.steps:
        parts.extend((step.output, step.error or ""))
    parts.append(traj.error or "")
    # A tool message usually repeats (a truncation of) its step's full output: index each text once.
    body = "\n".join(dict.fromkeys(p for p in parts if p))
    # SQLite text must be valid UTF-8 and FTS stops at NUL; the record keeps the exact text.
    return body.replace("\x00", " ").encode("utf-8", "replace").decode("utf-8")


def like_pattern(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def phrase(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'
