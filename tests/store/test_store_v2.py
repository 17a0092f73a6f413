"""Store schema v2: batched writes, the flags join table, unjudged rewards, resume look-ups, v1 upgrade."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from sparring.errors import StoreError
from sparring.store.base import TrajQuery
from sparring.store.sqlite import SCHEMA_VERSION, SQLiteStore
from sparring.trajectory import Trajectory


def traj(i: int, **kw) -> Trajectory:
    fields = dict(id=f"t{i:03d}", run_id="r", task_id=f"task-{i % 2}", task_digest="d" * 64, policy="oracle",
                  status="ok", reward=0.5, created_at=1_700_000_000.0 + i,
                  messages=[{"role": "user", "content": f"note number {i}"}])  # fmt: skip
    fields.update(kw)
    return Trajectory(**fields)


def test_put_many_is_one_transaction_all_or_nothing(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as s:
        s.put_many([traj(i) for i in range(10)])
        assert s.count() == 10
        bad = traj(99)
        bad.components = {"x": object()}  # type: ignore[dict-item]  # cannot be serialised
        with pytest.raises(StoreError, match="cannot serialise"):
            s.put_many([traj(50), bad])
        assert s.count() == 10  # t050 was not written either


def test_unjudged_reward_is_null_and_never_matches_a_reward_range(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as s:
        s.put_many([traj(0, status="infra_error", reward=None), traj(1, reward=0.0)])
        assert s.get("t000").reward is None
        total, page = s.search(TrajQuery(max_reward=0.0))
        assert total == 1 and page[0].id == "t001"
        assert s.search(TrajQuery(status="infra_error"))[0] == 1


def test_flags_search_uses_join_table_and_follows_rewrites(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as s:
        s.put_many([traj(i, flags=["test_tampering"] if i % 3 == 0 else []) for i in range(9)])
        assert s.search(TrajQuery(flag="test_tampering"))[0] == 3
        s.put(traj(0, flags=["sys_exit"]))  # rewritten: its old flag is gone
        assert s.search(TrajQuery(flag="test_tampering"))[0] == 2
        assert [t.id for t in s.search(TrajQuery(flag="sys_exit"))[1]] == ["t000"]
        plan = " ".join(
            str(r) for r in sqlite3.connect(s.path).execute(
                "EXPLAIN QUERY PLAN SELECT seq FROM traj_flags WHERE flag = 'sys_exit'"
            )
        )  # fmt: skip
        assert "USING PRIMARY KEY" in plan or "COVERING INDEX" in plan


def test_statuses_answer_which_samples_a_run_already_stored(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as s:
        s.put_many([traj(1), traj(2, status="infra_error", reward=None, attempts=3)])
        assert s.statuses(["t001", "t002", "t003"]) == {"t001": ("ok", 1), "t002": ("infra_error", 3)}


def test_text_search_counts_and_pages_every_kind_of_match(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "s.db") as s:
        s.put_many([traj(i) for i in range(30)])
        total, page = s.search(TrajQuery(text="note number", limit=5))
        assert total == 30 and [t.id for t in page] == ["t029", "t028", "t027", "t026", "t025"]
        total, page = s.search(TrajQuery(text="note number", task_id="task-1", limit=2, offset=1))
        assert total == 15 and [t.id for t in page] == ["t027", "t025"]
        assert s.search(TrajQuery(text="number 7"))[0] == 1
        assert s.search(TrajQuery(text="absent words"))[0] == 0


def _downgrade_to_v1(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE trajectories SET record = (SELECT r.record FROM traj_records r WHERE r.seq = trajectories.seq)"
    )
    conn.execute("DROP TABLE traj_records")
    conn.execute("DROP TABLE traj_flags")
    conn.execute("UPDATE schema_version SET version = 1")
    conn.commit()
    conn.close()


def test_a_v1_store_is_read_as_is_and_upgraded_on_write_open(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    with SQLiteStore(path) as s:
        s.put_many([traj(i, flags=["hardcoded_output"] if i == 4 else []) for i in range(6)])
    _downgrade_to_v1(path)
    with SQLiteStore(path, readonly=True) as ro:  # read-only: nothing is changed, answers are the same
        assert ro.schema_version == 1
        assert [t.id for t in ro.search(TrajQuery(flag="hardcoded_output"))[1]] == ["t004"]
        assert ro.get("t002").messages[0]["content"] == "note number 2"
    with SQLiteStore(path) as rw:
        assert rw.schema_version == SCHEMA_VERSION
        assert [t.id for t in rw.search(TrajQuery(flag="hardcoded_output"))[1]] == ["t004"]
        assert rw.get("t002").messages[0]["content"] == "note number 2"
        assert rw.count() == 6


def test_drop_run_after_removes_only_that_runs_later_rollouts(tmp_path: Path) -> None:
    """What --resume does with an interrupted iteration's rollouts: they go (and their text, flags)."""
    with SQLiteStore(tmp_path / "s.db") as s:
        s.put_many([traj(i, flags=["f"]) for i in range(6)] + [traj(9, run_id="other")])
        assert s.drop_run_after("r", 1_700_000_000.0 + 3.5) == 2  # t004, t005
        _, left = s.search(TrajQuery(limit=None))
        assert sorted(t.id for t in left) == ["t000", "t001", "t002", "t003", "t009"]
        assert s.search(TrajQuery(text="note number 5"))[0] == 0
        assert s.search(TrajQuery(flag="f"))[0] == 4
