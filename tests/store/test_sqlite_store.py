"""The SQLite trajectory store: idempotent writes, search, concurrency, refusal of foreign files, export."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparring.errors import ConfigError, StoreError
from sparring.store.base import TrajectoryStore, TrajQuery
from sparring.store.export import export_jsonl, export_parquet
from sparring.store.sqlite import SCHEMA_VERSION, SQLiteStore
from sparring.trajectory import TokenTrace, ToolStep, Trajectory


def make_traj(i: int = 0, **kw: Any) -> Trajectory:
    """A small judged trajectory; every field a filter looks at can be overridden."""
    fields: dict[str, Any] = dict(
        id=f"traj-{i:04d}",
        run_id="run-a",
        task_id=f"task-{i % 3}",
        task_digest="d" * 64,
        family="code-repair",
        policy="oracle",
        judge_version="j1",
        status="ok",
        reward=i / 10,
        flags=[],
        created_at=1_700_000_000.0 + i,
        messages=[
            {"role": "system", "content": "You are a careful engineer."},
            {"role": "user", "content": f"Fix bug number {i} in calc.py"},
            {
                "role": "assistant",
                "content": "Let me run the tests.",
                "tool_calls": [
                    {
                        "id": "call_0",
                        "type": "function",
                        "function": {
                            "name": "bash",
                            "arguments": json.dumps({"command": f"pytest -k case{i}"}),
                        },
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_0", "content": "1 failed [truncated]"},
        ],
        steps=[
            ToolStep(
                index=0,
                tool_call_id="call_0",
                name="bash",
                output=f"FAILED test_calc.py::test_div - ZeroDivisionError step{i}",
                exit_code=1,
            )
        ],
    )
    fields.update(kw)
    return Trajectory(**fields)


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _like_only(conn: sqlite3.Connection) -> str:
    conn.execute("CREATE TABLE traj_text (seq INTEGER PRIMARY KEY, body TEXT NOT NULL)")
    return "like"


@pytest.fixture
def store(tmp_path: Path):
    s = SQLiteStore(tmp_path / "store.db")
    yield s
    s.close()


@pytest.fixture(params=["fts5-trigram", "like"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A store with each text index: FTS5 trigram, and the LIKE fallback for SQLite without FTS5."""
    if request.param == "like":
        monkeypatch.setattr(SQLiteStore, "_create_text_index", staticmethod(_like_only))
    elif not _has_trigram():
        pytest.skip("this SQLite has no FTS5 trigram tokenizer")
    s = SQLiteStore(tmp_path / "store.db")
    assert s.text_index == request.param
    yield s
    s.close()


def _has_trigram() -> bool:
    conn = sqlite3.connect(":memory:")
    try:
        conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='trigram')")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def test_store_implements_protocol_and_creates_parent_dirs(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "a" / "b" / "s.db") as s:
        assert isinstance(s, TrajectoryStore)
        assert s.count() == 0
    assert (tmp_path / "a" / "b" / "s.db").is_file()
    assert not [p for p in (tmp_path / "a" / "b").iterdir() if p.name.endswith(".init")]


def test_file_is_wal_sqlite_with_schema_version(store: SQLiteStore) -> None:
    store.put(make_traj(1))
    conn = sqlite3.connect(store.path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == SCHEMA_VERSION
        tables = {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")
        }
        assert {"runs", "trajectories", "traj_text", "ix_traj_task_id", "ix_traj_reward"} <= tables
        row = conn.execute("SELECT task_id, status, reward, flags FROM trajectories").fetchone()
        assert row == ("task-1", "ok", 0.1, "[]")
    finally:
        conn.close()


def test_put_then_get_round_trips_exactly(store: SQLiteStore) -> None:
    t = make_traj(
        3,
        components={"all_pass": 1.0, "lint": 0.5},
        flags=["hardcoded_output"],
        traces=[TokenTrace(turn=0, message_index=2, prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.5])],
        diff={"files": {"calc.py": {"text": "x = 1\n"}}, "deleted": ["old.py"]},
    )
    store.put(t)
    assert store.get(t.id) == t


def test_put_same_id_replaces_never_duplicates(store: SQLiteStore) -> None:
    store.put(make_traj(1, reward=0.0, messages=[{"role": "user", "content": "first version"}]))
    store.put(make_traj(1, reward=1.0, messages=[{"role": "user", "content": "second version"}]))
    assert store.count() == 1
    assert store.get("traj-0001").reward == 1.0
    assert store.search(TrajQuery(text="second version"))[0] == 1
    assert store.search(TrajQuery(text="first version"))[0] == 0  # the text index was replaced too


def test_get_missing_id_names_id_and_store(store: SQLiteStore) -> None:
    with pytest.raises(StoreError, match=r"no trajectory nope in .*store\.db"):
        store.get("nope")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (TrajQuery(task_id="task-1"), {1, 4, 7}),
        (TrajQuery(family="data-analysis"), {8}),
        (TrajQuery(status="timeout"), {2, 5}),
        (TrajQuery(min_reward=0.7), {7, 8, 9}),
        (TrajQuery(max_reward=0.1), {0, 1}),
        (TrajQuery(min_reward=0.2, max_reward=0.4), {2, 3, 4}),
        (TrajQuery(flag="test_tampering"), {3, 6}),
        (TrajQuery(flag="test_tamper"), set()),  # flags match exactly, not as substrings
        (TrajQuery(policy="random"), {9}),
        (TrajQuery(judge_version="j2"), {0}),
        (TrajQuery(run_id="run-b"), {5, 6}),
        (TrajQuery(text="bug number 4 "), {4}),  # user message text
        (TrajQuery(text="zerodivisionerror STEP6"), {6}),  # full tool output, case-insensitive
        (TrajQuery(text="-k case9"), {9}),  # tool-call arguments
        (TrajQuery(text="UG"), set(range(10))),  # short query (below the trigram length)
        (TrajQuery(text="100%"), set()),
        (TrajQuery(text="%"), set()),  # LIKE wildcards are literal
        (TrajQuery(text="_"), {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}),  # ... and match themselves (test_div)
        (TrajQuery(text='"quoted"'), set()),  # FTS syntax is literal
        (TrajQuery(task_id="task-1", status="ok", min_reward=0.5), {7}),
    ],
)
def test_search_filters(any_store: SQLiteStore, query: TrajQuery, expected: set[int]) -> None:
    store = any_store
    for i in range(10):
        kw: dict[str, Any] = {}
        if i in (2, 5):
            kw["status"] = "timeout"
        if i in (3, 6):
            kw["flags"] = ["test_tampering", "other"]
        if i == 8:
            kw["family"] = "data-analysis"
        if i == 9:
            kw["policy"] = "random"
        if i == 0:
            kw["judge_version"] = "j2"
        if i in (5, 6):
            kw["run_id"] = "run-b"
        store.put(make_traj(i, **kw))
    total, page = store.search(query.model_copy(update={"limit": None}))
    assert {int(t.id.split("-")[1]) for t in page} == expected
    assert total == len(expected)


def test_search_pages_newest_first_with_total(store: SQLiteStore) -> None:
    for i in range(12):
        store.put(make_traj(i))
    total, page = store.search(TrajQuery(limit=5, offset=2))
    assert total == 12
    assert [t.id for t in page] == [f"traj-{i:04d}" for i in (9, 8, 7, 6, 5)]
    assert [t.id for t in store.iter_search(TrajQuery(limit=None), batch_size=4)] == [
        f"traj-{i:04d}" for i in range(11, -1, -1)
    ]


def test_text_search_finds_content_parts_and_errors(any_store: SQLiteStore) -> None:
    store = any_store
    store.put(
        make_traj(1, messages=[{"role": "user", "content": [{"type": "text", "text": "multipart hello"}]}])
    )
    store.put(make_traj(2, status="policy_error", error="server said: overloaded"))
    assert [t.id for t in store.search(TrajQuery(text="MULTIPART"))[1]] == ["traj-0001"]
    assert [t.id for t in store.search(TrajQuery(text="overloaded"))[1]] == ["traj-0002"]


def test_runs_are_recorded(store: SQLiteStore) -> None:
    store.start_run("r1", {"group_size": 4, "tools": [{"type": "function"}]})
    store.start_run("r1", {"group_size": 8})  # idempotent: config updated, still one run
    store.finish_run("r1", {"reward_mean": 0.5})
    run = store.get_run("r1")
    assert run is not None
    assert run["config"] == {"group_size": 8}
    assert run["summary"] == {"reward_mean": 0.5}
    assert run["finished_at"] >= run["started_at"]
    assert store.get_run("missing") is None


def test_reopen_and_readonly(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with SQLiteStore(path) as s:
        s.put(make_traj(1))
    with SQLiteStore(path, readonly=True) as ro:
        assert ro.get("traj-0001").task_id == "task-1"
        with pytest.raises(StoreError, match="read-only"):
            ro.put(make_traj(2))
    with SQLiteStore(path) as s:
        assert s.count() == 1


def test_readonly_open_of_missing_path_creates_nothing(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no trajectory store at"):
        SQLiteStore(tmp_path / "missing" / "s.db", readonly=True)
    assert list(tmp_path.iterdir()) == []


def test_closed_store_raises(tmp_path: Path) -> None:
    s = SQLiteStore(tmp_path / "s.db")
    s.close()
    s.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        s.count()


def _foreign_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    conn.execute("INSERT INTO notes(body) VALUES ('keep me')")
    conn.commit()
    conn.close()


@pytest.mark.parametrize("kind", ["garbage", "text", "empty", "foreign_sqlite", "truncated_header"])
@pytest.mark.parametrize("readonly", [False, True])
def test_non_store_file_is_refused_and_untouched(tmp_path: Path, kind: str, readonly: bool) -> None:
    path = tmp_path / "thing.db"
    if kind == "garbage":
        path.write_bytes(bytes(range(256)) * 8)
    elif kind == "text":
        path.write_text("id,reward\n1,0.5\n")
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "truncated_header":
        path.write_bytes(b"SQLite format")
    else:
        _foreign_sqlite(path)
    before = sha(path)
    with pytest.raises(StoreError) as err:
        SQLiteStore(path, readonly=readonly)
    assert "\n" not in str(err.value)
    assert "not a Sparring trajectory store" in str(err.value)
    assert sha(path) == before


def test_directory_and_newer_schema_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is a directory"):
        SQLiteStore(tmp_path)
    path = tmp_path / "future.db"
    SQLiteStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION + 1,))
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="newer than this sparring"):
        SQLiteStore(path)


def test_threads_writing_distinct_ids_lose_nothing(store: SQLiteStore) -> None:
    n_threads, per_thread = 8, 25
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            for j in range(per_thread):
                store.put(make_traj(k * per_thread + j))
                store.search(TrajQuery(task_id="task-0", limit=1))  # reads interleaved with writes
        except BaseException as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.count() == n_threads * per_thread
    assert store.search(TrajQuery(text="step137"))[0] == 1


def _process_writer(path: str, start: int, n: int, barrier: Any) -> None:
    """Runs in a child process: open the not yet existing store at the same moment as its twin, write n."""
    barrier.wait(60)
    with SQLiteStore(path) as s:
        for i in range(start, start + n):
            s.put(make_traj(i))


def test_two_processes_writing_one_file_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "shared.db")
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(2)
    procs = [ctx.Process(target=_process_writer, args=(path, k * 100, 100, barrier)) for k in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    with SQLiteStore(path, readonly=True) as s:
        assert s.count() == 200
        assert {t.id for t in s.iter_search(TrajQuery(limit=None))} == {f"traj-{i:04d}" for i in range(200)}


def test_arbitrary_unicode_round_trips(tmp_path: Path) -> None:
    """Any text (lone surrogates, NULs, astral planes) survives put/get, in values and in keys."""
    with SQLiteStore(tmp_path / "u.db") as s:

        @settings(max_examples=80, deadline=None)
        @given(text=st.text(st.characters(blacklist_categories=())), key=st.text(min_size=1, max_size=5))
        def check(text: str, key: str) -> None:
            t = make_traj(
                1,
                messages=[{"role": "user", "content": text, key: [text]}],
                steps=[ToolStep(index=0, tool_call_id="c", name="bash", output=text)],
                error=text,
            )
            s.put(t)
            got = s.get(t.id)
            assert got.messages == t.messages
            assert got.steps[0].output == text
            assert got == t

        check()
        assert s.count() == 1


@settings(max_examples=30, deadline=None)
@given(ids=st.lists(st.integers(0, 15), max_size=40))
def test_count_equals_distinct_ids_whatever_the_write_order(
    tmp_path_factory: pytest.TempPathFactory, ids: list[int]
) -> None:
    with SQLiteStore(tmp_path_factory.mktemp("p") / "p.db") as s:
        for n, i in enumerate(ids):
            s.put(make_traj(i, reward=float(n)))
        assert s.count() == len(set(ids))
        for i in set(ids):  # the last write of each id wins
            assert s.get(f"traj-{i:04d}").reward == float(max(n for n, j in enumerate(ids) if j == i))


def test_export_jsonl_round_trips_messages(store: SQLiteStore, tmp_path: Path) -> None:
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    store.start_run("run-a", {"tools": tools})
    for i in range(5):
        store.put(make_traj(i, status="ok" if i % 2 == 0 else "timeout"))
    store.put(make_traj(9, run_id="", messages=[{"role": "user", "content": "emoji \U0001f600 and \ud800"}]))
    out = tmp_path / "out" / "sft.jsonl"
    assert export_jsonl(store, TrajQuery(limit=None), out) == 6
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    by_id = {r["id"]: r for r in rows}
    assert set(by_id) == {f"traj-{i:04d}" for i in (0, 1, 2, 3, 4, 9)}
    r = by_id["traj-0002"]
    assert r["messages"] == store.get("traj-0002").messages
    assert r["tools"] == tools
    assert (r["reward"], r["task_id"], r["status"]) == (0.2, "task-2", "ok")
    assert "tools" not in by_id["traj-0009"]  # its run recorded no tools
    assert by_id["traj-0009"]["messages"][0]["content"] == "emoji \U0001f600 and \ud800"
    assert export_jsonl(store, TrajQuery(status="timeout", limit=None), out) == 2


class _FailingStore:
    """Delegates to a real store but breaks after the first trajectory of an export."""

    def __init__(self, inner: SQLiteStore) -> None:
        self.inner = inner

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        return self.inner.get_run(run_id)

    def iter_search(self, query: TrajQuery, batch_size: int = 256):
        for n, t in enumerate(self.inner.iter_search(query, batch_size)):
            if n == 1:
                raise StoreError("disk on fire")
            yield t


def test_failed_export_leaves_no_partial_file(store: SQLiteStore, tmp_path: Path) -> None:
    for i in range(3):
        store.put(make_traj(i))
    out_dir = tmp_path / "exports"
    out_dir.mkdir()
    out = out_dir / "x.jsonl"
    with pytest.raises(StoreError, match="disk on fire"):
        export_jsonl(_FailingStore(store), TrajQuery(limit=None), out)  # type: ignore[arg-type]
    assert list(out_dir.iterdir()) == []
    out.write_text("previous export\n")
    with pytest.raises(StoreError):
        export_jsonl(_FailingStore(store), TrajQuery(limit=None), out)  # type: ignore[arg-type]
    assert out.read_text() == "previous export\n"
    assert [p.name for p in out_dir.iterdir()] == ["x.jsonl"]


def test_export_parquet(store: SQLiteStore, tmp_path: Path) -> None:
    store.put(make_traj(1))
    out = tmp_path / "x.parquet"
    try:
        import pyarrow.parquet as pq
    except ImportError:
        with pytest.raises(ConfigError, match=r"pip install 'sparring\[data\]'"):
            export_parquet(store, TrajQuery(), out)
        assert not out.exists()
        return
    assert export_parquet(store, TrajQuery(), out) == 1
    table = pq.read_table(out)
    row = table.to_pylist()[0]
    assert row["id"] == "traj-0001"
    assert row["messages"][1]["content"] == "Fix bug number 1 in calc.py"


def test_failed_write_is_rolled_back_entirely(store: SQLiteStore) -> None:
    conn = sqlite3.connect(store.path)
    conn.execute("DROP TABLE traj_text")  # the second statement of put() will now fail
    conn.commit()
    conn.close()
    with pytest.raises(StoreError, match="traj_text"):
        store.put(make_traj(1))
    assert store.count() == 0  # the trajectories row of the failed put is gone too
