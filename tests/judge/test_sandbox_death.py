"""A judge sandbox the candidate breaks is the candidate's fault, and the reference never runs where it ran.

* A failing workspace that goes for the judge's PID 1 (its CPU limit, its scheduling, a flood of
  output: the red team's way to turn a 0 into ``judge_error``) is judged: reward 0, exit 0.
* When PID 1 does die while the candidate's code runs (killed here from the host, the way a
  successful attack would end it), ``judge score`` still judges: reward 0 with ``sandbox_killed``.
* A buggy candidate that leaves a background planter behind cannot make the reference's dynamic
  outputs its own: they come from a sandbox no candidate ran in (fresh judge and warm pool alike).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.judge.runner.sandbox import JudgePool
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.sandbox_spec import spec_for_task
from tests_support import HANG_S, procs_with, wait_until

SPARRING = [str(Path(sys.executable).parent / "sparring")]
BUGGY_CLAMP_TAIL = "\n\ndef clamp(x, lo, hi):\n    return x\n"

# Candidate code run at import by the judge's tests: bend PID 1 every way a process of the same uid
# could, then flood the channel for a while. Bounded: 3 s of output.
BEND_AND_FLOOD = """
import ctypes, os, resource, sys, time
for call in (lambda: resource.prlimit(1, resource.RLIMIT_CPU, (1, 1)),
             lambda: os.setpriority(os.PRIO_PROCESS, 1, 19),
             lambda: os.sched_setscheduler(1, os.SCHED_IDLE, os.sched_param(0)),
             lambda: resource.prlimit(1, resource.RLIMIT_NOFILE, (0, 0))):
    try:
        call()
        print("BENT", file=sys.stderr)
    except OSError:
        pass
_end = time.time() + 3
while time.time() < _end:
    sys.stdout.write("z" * 65536)
    sys.stderr.write("w" * 65536)
"""
# Candidate code run at import: a marked process the host can find, then a wait to be killed (bounded).
AWAIT_KILL = """
import subprocess, time
subprocess.Popen(["sleep", "{marker}"])
time.sleep(60)
"""


def _score(task: Path, ws: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [*SPARRING, "judge", "score", "--task", str(task), "--workspace", str(ws), "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
    )  # fmt: skip


def _workspace(task, tmp_path: Path, core: str) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace, ws)
    (ws / "mathx" / "core.py").write_text(core)
    return ws


def _sandbox_init(pid: int) -> int | None:
    """The host pid of PID 1 of the pid namespace host process ``pid`` is in (walking up its parents)."""
    for _ in range(64):
        try:
            status = dict(ln.split(":", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines())
        except OSError:
            return None
        if status["NSpid"].split()[-1] == "1":
            return pid
        pid = int(status["PPid"])
    return None


def test_a_candidate_bending_pid1_is_judged_not_a_judge_error(clamp_task, tmp_path):
    ws = _workspace(clamp_task, tmp_path, BEND_AND_FLOOD + BUGGY_CLAMP_TAIL)
    p = _score(clamp_task.path, ws)
    out, err = p.communicate(timeout=600)
    assert p.returncode == 0, err[-2000:]
    d = json.loads(out)
    assert d["status"] == "ok" and d["reward"] == 0.0, d
    assert "BENT" not in d.get("log", "")  # every call on PID 1 was refused


def test_a_sandbox_that_dies_under_the_candidate_scores_zero_with_a_flag(clamp_task, tmp_path):
    marker = f"{50 + uuid.uuid4().int % 40}.{uuid.uuid4().int % 10**9:09d}"
    ws = _workspace(clamp_task, tmp_path, AWAIT_KILL.format(marker=marker) + BUGGY_CLAMP_TAIL)
    p = _score(clamp_task.path, ws)
    try:
        found = wait_until(lambda: procs_with(f"sleep {marker}"), timeout_s=HANG_S)
        assert found, "the candidate's code never ran"  # positive control: the payload runs in the judge
        init = _sandbox_init(found[0])
        assert init is not None and init != found[0]
        os.kill(init, signal.SIGKILL)  # what a successful attack on PID 1 does
        out, err = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode == 0, err[-2000:]
    d = json.loads(out)
    assert d["status"] == "ok" and d["reward"] == 0.0 and "sandbox_killed" in d["flags"], d


# A buggy clip_sum that, at import, leaves a planter writing itself over /workspace/solution.py: in a
# sandbox reset (or not) after it ran, the reference's driver would import the candidate's code.
PLANTER = """\
import os, time

_ME = open(__file__).read() if os.path.exists(__file__) else ""
if _ME and os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        _end = time.time() + 30
        while time.time() < _end:
            try:
                with open("/workspace/solution.py", "w") as f:
                    f.write(_ME)
            except OSError:
                pass
            time.sleep(0.002)
        os._exit(0)
    os._exit(0)


def clip_sum(xs, lo, hi):
    return sum(xs)
"""


def test_the_planter_works_in_a_plain_sandbox(backend, dynamic_task):
    """Positive control: the planter keeps the candidate's file in place whatever is written over it."""

    async def body():
        sb = await backend.create(spec_for_task(dynamic_task))
        try:
            await sb.write_file("solution.py", PLANTER.encode())
            await sb.exec(["python", "-c", "import solution"], timeout=30)
            await sb.write_file("solution.py", b"def clip_sum(xs, lo, hi):\n    return 0\n")
            await sb.exec("sleep 0.2", timeout=30)
            return (await sb.read_file("solution.py")).decode()
        finally:
            await sb.close()

    assert asyncio.run(body()) == PLANTER


@pytest.mark.parametrize("pooled", [False, True], ids=["fresh", "pool"])
def test_a_planter_never_reaches_the_reference(backend, dynamic_task, pooled):
    if pooled and getattr(backend, "mode", "") != "overlay":
        pytest.skip("the pool is used only where reset discards everything (overlay mode)")
    cfg = JudgeConfig(dynamic_seed=7, shuffle_seed=7)
    diff = WorkspaceDiff(files={"solution.py": PLANTER.encode()})

    async def go():
        pool = JudgePool(backend, max_idle=1) if pooled else None
        try:
            judge = PytestJudge(backend, config=cfg, pool=pool)
            # twice: from a task's second judgement on, the trace is cached and only dynamic outputs remain
            return [await judge.score(dynamic_task, diff) for _ in range(2)]
        finally:
            if pool is not None:
                await pool.close()

    t0 = time.monotonic()
    results = asyncio.run(go())
    for r in results:
        assert r.status == "ok" and r.reward == 0.0, (r.status, r.reason, r.log[-500:])
        assert r.components["dynamic"] < 0.5, (r.components, time.monotonic() - t0)
