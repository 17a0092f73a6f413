"""The rollout process itself killed (SIGKILL) or stopped (SIGTERM) mid-run and started again with its
run id: afterwards every requested sample is stored exactly once. Bad input is a one-line error that
loses nothing."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fault_support import FaultyPolicyServer, assert_accounted

from sparring.store.sqlite import SQLiteStore
from tests_support import make_clamp_task

EXE = Path(sys.executable).parent / "sparring"
GROUP = 3


@pytest.fixture(scope="module")
def three_tasks(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("three")
    for name in ("clamp-a", "clamp-b", "clamp-c"):
        make_clamp_task(root / name, task_id=name)
    return root


def _cmd(tasks: Path, store: Path, run_id: str, *extra: str) -> list[str]:
    return [str(EXE), "rollout", "--tasks", str(tasks), "--policy", "oracle", "--group-size", str(GROUP),
            "--concurrency", "2", "--store", str(store), "--run-id", run_id, "--json", *extra]  # fmt: skip


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "SPARRING_DEBUG"}


def _stored(store: Path, run_id: str) -> int:
    if not store.exists():
        return 0
    try:
        conn = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=5)
        try:
            return int(
                conn.execute("SELECT count(*) FROM trajectories WHERE run_id = ?", (run_id,)).fetchone()[0]
            )
        finally:
            conn.close()
    except sqlite3.Error:
        return 0


def _wait_stored(proc: subprocess.Popen, store: Path, run_id: str, n: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while _stored(store, run_id) < n:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline, "nothing was stored in time"
        time.sleep(0.05)


def test_rollout_killed_with_sigkill_and_restarted_stores_every_sample_once(three_tasks, tmp_path):
    store = tmp_path / "s.db"
    proc = subprocess.Popen(_cmd(three_tasks, store, "K1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=_env())  # fmt: skip
    try:
        _wait_stored(proc, store, "K1", 2)
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.wait()
    before = _stored(store, "K1")
    assert 2 <= before < 3 * GROUP
    r = subprocess.run(
        _cmd(three_tasks, store, "K1"), capture_output=True, text=True, env=_env(), timeout=300
    )
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert (
        j["requested"] == j["stored"] == 3 * GROUP and j["resumed"] == before and j["statuses"] == {"ok": 9}
    )
    with SQLiteStore(store, readonly=True) as s:
        trajs = assert_accounted(s, "K1", 3 * GROUP)
    assert all(t.reward == 1.0 for t in trajs)


def test_sigterm_drains_in_flight_work_exits_130_and_the_run_resumes(three_tasks, tmp_path):
    store = tmp_path / "s.db"
    proc = subprocess.Popen(_cmd(three_tasks, store, "T1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=_env())  # fmt: skip
    try:
        _wait_stored(proc, store, "T1", 1)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    j = json.loads(out)
    assert (
        j["interrupted"] and j["stored"] == _stored(store, "T1") and j["stored"] + j["pending"] == 3 * GROUP
    )
    assert "continue with --run-id T1" in err
    r = subprocess.run(
        _cmd(three_tasks, store, "T1"), capture_output=True, text=True, env=_env(), timeout=300
    )
    j2 = json.loads(r.stdout)
    assert r.returncode == 0 and j2["stored"] == 3 * GROUP and j2["resumed"] == j["stored"]
    with SQLiteStore(store, readonly=True) as s:
        assert_accounted(s, "T1", 3 * GROUP)
        run = s.get_run("T1")
    assert run is not None and run["summary"]["interrupted"] is False


def _one_line_error(r: subprocess.CompletedProcess) -> str:
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    return lines[0]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_bad_input_is_one_line_and_loses_nothing(clamp_task, tmp_path):
    store = tmp_path / "s.db"
    ok = subprocess.run(
        _cmd(clamp_task.path, store, "B1"), capture_output=True, text=True, env=_env(), timeout=300
    )
    assert ok.returncode == 0, ok.stderr
    before = _sha(store)

    def rollout(policy: str, st: Path = store) -> subprocess.CompletedProcess:
        # the policy timeout bounds a hang only: nothing here should time out, even on a loaded host
        cmd = [str(EXE), "rollout", "--tasks", str(clamp_task.path), "--policy", policy, "--store", str(st),
               "--policy-timeout", "60"]  # fmt: skip
        return subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=120)

    with socket_port() as port:  # nothing listens there
        line = _one_line_error(rollout(f"openai:http://127.0.0.1:{port}/v1#m"))
    assert "cannot reach the policy server" in line
    with FaultyPolicyServer(clamp_task) as srv:
        line = _one_line_error(rollout(f"openai:{srv.url}#no-such-model"))
    assert "'no-such-model' is not served" in line and srv.model in line
    foreign = tmp_path / "notes.db"
    foreign.write_text("id,reward\n1,0.5\n")
    line = _one_line_error(rollout("oracle", foreign))
    assert "not a Sparring trajectory store" in line and foreign.read_text() == "id,reward\n1,0.5\n"
    assert _sha(store) == before  # nothing already stored was touched
    with SQLiteStore(store, readonly=True) as s:
        assert s.count() == GROUP


class socket_port:
    """A local port with nothing listening on it: held bound (not listening) until exit, so no other
    process on a shared machine can take it meanwhile; connecting to it is refused."""

    def __enter__(self) -> int:
        import socket

        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        return int(self.sock.getsockname()[1])

    def __exit__(self, *exc: object) -> None:
        self.sock.close()
