"""The reference trace kept between processes: read instead of re-run, same verdicts, nothing trusted blindly."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.judge.trace_cache import ENV, FORMAT, TraceCache, decode, encode, task_trace_key, trace_key
from sparring.judge.withheld import RefTrace
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.attacks import HACKS
from sparring.tasks.loader import solution_diff
from tests_support import FIXED_CLAMP

SPARRING = str(Path(sys.executable).parent / "sparring")
CFG = JudgeConfig(dynamic_seed=3, shuffle_seed=3)


def verdict(r):
    return r.status, r.reward, sorted(r.flags), dict(r.per_test)


def entries(root: Path) -> list[Path]:
    return sorted(root.rglob("*.json"))


def test_a_fresh_judge_reads_the_trace_another_stored_and_judges_alike(backend, clamp_task, tmp_path):
    cache = TraceCache(tmp_path / "traces")
    cases = [solution_diff(clamp_task), WorkspaceDiff(), HACKS["conftest_forces_pass"](clamp_task),
             HACKS["exit_zero_at_import"](clamp_task)]  # fmt: skip

    async def go():
        first = PytestJudge(backend, config=CFG, trace_cache=cache)
        a = [await first.score(clamp_task, d) for d in cases]
        stored = entries(cache.root)
        second = PytestJudge(backend, config=CFG, trace_cache=cache)  # another process, as far as it knows
        b = [await second.score(clamp_task, d) for d in cases]
        alone = PytestJudge(backend, config=CFG, trace_cache=None)
        c = [await alone.score(clamp_task, d) for d in cases]
        return a, b, c, stored

    a, b, c, stored = asyncio.run(go())
    # the first judgement ran the reference's probes and stored the trace; nothing after it ran them again
    assert [r.metrics["reference_trace_run"] for r in a] == [1.0, 0.0, 0.0, 0.0]
    assert [r.metrics["reference_trace_run"] for r in b] == [0.0] * len(cases)
    assert [r.metrics["reference_trace_run"] for r in c] == [1.0, 0.0, 0.0, 0.0]  # no cache: its own run
    assert len(stored) == 1 and json.loads(stored[0].read_text())["format"] == FORMAT
    assert [verdict(r) for r in a] == [verdict(r) for r in b] == [verdict(r) for r in c]
    assert [r.reward for r in b] == [1.0, 0.0, 0.0, 0.0]


def test_an_entry_that_does_not_hold_up_is_ignored_and_made_again(backend, clamp_task, tmp_path):
    cache = TraceCache(tmp_path / "traces")
    key = task_trace_key(clamp_task, PytestJudge(backend, config=CFG, trace_cache=None).version, False)
    path = cache.root / key[:2] / f"{key}.json"
    good = {"format": FORMAT, "key": key, "counts": {}, "unverifiable": [], "fallback": []}
    bad_entries = [
        b"\x00not json",
        b"[]",
        json.dumps({**good, "key": "0" * 64}).encode(),  # made for another key (a copied file)
        json.dumps({**good, "format": "sparring-reference-trace/0"}).encode(),
        json.dumps({**good, "counts": {"t": {"x": 1}}}).encode(),  # a site id that is not one
        json.dumps({**good, "counts": {"t": {"1": -1}}}).encode(),
        json.dumps({**good, "unverifiable": ["1"]}).encode(),
    ]

    async def judge_with(entry: bytes):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(entry)
        return await PytestJudge(backend, config=CFG, trace_cache=cache).score(
            clamp_task, solution_diff(clamp_task)
        )

    for entry in bad_entries:
        r = asyncio.run(judge_with(entry))
        assert r.metrics["reference_trace_run"] == 1.0 and r.reward == 1.0, entry
        assert decode(key, json.loads(path.read_text())) is not None  # replaced by a good one
    # An entry others may write, or someone else's file, would let them choose what the judge expects.
    for mode, uid in ((0o666, os.getuid()), (0o620, os.getuid()), (0o600, 65534)):
        r = asyncio.run(judge_with(json.dumps(good).encode()))  # a good entry: used as it is...
        assert r.metrics["reference_trace_run"] == 0.0
        path.chmod(mode)
        if uid != os.getuid():
            if os.getuid() != 0:
                continue  # only root can give a file away
            os.chown(path, uid, -1)
        r = asyncio.run(
            PytestJudge(backend, config=CFG, trace_cache=cache).score(clamp_task, solution_diff(clamp_task))
        )
        assert r.metrics["reference_trace_run"] == 1.0, (oct(mode), uid)  # ...but not this one
        path.unlink()
    # An entry that holds up is used as it is, even one saying the reference observed nothing: the cache is
    # the host's own file, like the admission verdicts beside it (its key is what it must match).
    r = asyncio.run(judge_with(json.dumps(good).encode()))
    assert r.metrics["reference_trace_run"] == 0.0


def test_a_cache_that_cannot_be_written_costs_only_the_rerun(backend, clamp_task, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = TraceCache(blocker / "traces")

    async def go():
        return [await PytestJudge(backend, config=CFG, trace_cache=cache).score(clamp_task, solution_diff(clamp_task))
                for _ in range(2)]  # fmt: skip

    rs = asyncio.run(go())
    assert [(r.reward, r.metrics["reference_trace_run"]) for r in rs] == [(1.0, 1.0), (1.0, 1.0)]


def test_the_key_moves_with_everything_the_trace_depends_on(clamp_task, monkeypatch):
    base = ("sha256:" + "a" * 64, "judge-v", False, "host-1")
    keys = {trace_key(*base), trace_key("sha256:" + "b" * 64, *base[1:]), trace_key(base[0], "judge-w", *base[2:]),
            trace_key(*base[:2], True, base[3]), trace_key(*base[:3], "host-2"), trace_key(*base[:3], None)}  # fmt: skip
    assert len(keys) == 6
    # a task without its own image: the host system it runs on is part of the key
    import sparring.sandbox.hostenv as hostenv

    before = task_trace_key(clamp_task, "judge-v", False)
    real = hostenv.current_host_environment()

    class Upgraded:
        id = real.id + "-upgraded"

    monkeypatch.setattr(hostenv, "current_host_environment", lambda: Upgraded())
    assert task_trace_key(clamp_task, "judge-v", False) != before
    # and a task with its own image: its (pinned) image is its system, whatever the host
    pinned = clamp_task.spec.model_copy(
        update={
            "environment": clamp_task.spec.environment.model_copy(update={"image": "x@sha256:" + "c" * 64})
        }
    )
    imaged = dataclasses.replace(clamp_task, spec=pinned)
    assert task_trace_key(imaged, "judge-v", False) == trace_key(imaged.digest, "judge-v", False, None)


def test_off_turns_it_off(monkeypatch, tmp_path, backend):
    monkeypatch.setenv(ENV, "off")
    assert TraceCache.default() is None and PytestJudge(backend).trace_cache is None
    monkeypatch.setenv(ENV, str(tmp_path / "c"))
    assert PytestJudge(backend).trace_cache.root == tmp_path / "c"


traces = st.builds(
    RefTrace,
    st.dictionaries(st.text(max_size=20), st.dictionaries(st.integers(0, 10**6), st.integers(0, 10**6), max_size=5),
                    max_size=5),
    st.frozensets(st.integers(0, 10**6), max_size=5),
    st.frozensets(st.integers(0, 10**6), max_size=5),
)  # fmt: skip


@given(traces)
def test_a_trace_survives_its_file(trace):
    key = "k" * 64
    assert decode(key, json.loads(json.dumps(encode(key, trace)))) == trace


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3)))  # fmt: skip
def test_decoding_anything_gives_a_trace_or_none(data):
    for d in (data, {"format": FORMAT, "key": "k", "counts": data, "unverifiable": [], "fallback": []}):
        assert decode("k", d) is None or isinstance(decode("k", d), RefTrace)


def test_two_cli_runs_make_the_trace_once(clamp_task, tmp_path):
    """Across processes: the second `sparring judge score` of a task reads what the first stored."""
    ws = tmp_path / "ws"
    shutil.copytree(clamp_task.workspace, ws)
    (ws / "mathx" / "core.py").write_text(FIXED_CLAMP)
    env = {**os.environ, ENV: str(tmp_path / "traces")}
    runs = []
    for _ in range(2):
        r = subprocess.run([SPARRING, "judge", "score", "--task", str(clamp_task.path), "--workspace", str(ws),
                            "--json"], capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        runs.append(json.loads(r.stdout))
    assert [d["metrics"]["reference_trace_run"] for d in runs] == [1.0, 0.0]
    assert [d["reward"] for d in runs] == [1.0, 1.0] and runs[0]["per_test"] == runs[1]["per_test"]
