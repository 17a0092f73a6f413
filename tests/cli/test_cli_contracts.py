"""The CLI contracts (docs/cli.md), through the real `sparring` executable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXE = Path(sys.executable).parent / "sparring"


def sp(*args, timeout=300, cwd=None):
    env = {k: v for k, v in os.environ.items() if k != "SPARRING_DEBUG"}
    return subprocess.run(
        [str(EXE), *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env
    )


def one_line_error(r):
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "Traceback" not in r.stderr


def test_every_group_has_help():
    for group in ("sandbox", "tasks", "judge", "traj", "rollout", "train", "demo", "eval", "report"):
        r = sp(group, "--help")
        assert r.returncode == 0 and "Usage" in r.stdout, group


def test_sandbox_exec_is_copy_on_write(workspace):
    r = sp(
        "sandbox",
        "exec",
        "--workspace",
        workspace,
        "--",
        "sh",
        "-c",
        "echo x > /workspace/f.txt; cat /workspace/f.txt",
    )
    assert r.returncode == 0 and r.stdout == "x\n"
    assert (workspace / "f.txt").read_text() == "orig\n"
    r = sp(
        "sandbox",
        "exec",
        "--json",
        "--workspace",
        workspace,
        "--",
        "sh",
        "-c",
        "echo hi; echo err >&2; exit 5",
    )
    j = json.loads(r.stdout)
    assert r.returncode == 5
    assert {k: j[k] for k in ("exit_code", "stdout", "stderr", "timed_out", "oom_killed")} == {
        "exit_code": 5,
        "stdout": "hi\n",
        "stderr": "err\n",
        "timed_out": False,
        "oom_killed": False,
    }
    assert j["duration_ms"] > 0


def test_sandbox_exec_timeout_exits_124():
    r = sp("sandbox", "exec", "--timeout", "1", "--", "sleep", "30")
    assert r.returncode == 124


def test_sandbox_exec_memory_limit_json():
    r = sp(
        "sandbox", "exec", "--json", "--memory-mb", "64", "--", "python", "-c", "b = bytearray(512 * 2**20)"
    )
    j = json.loads(r.stdout)
    assert j["oom_killed"] is True and j["exit_code"] != 0


@pytest.mark.parametrize(
    "args",
    [
        ["sandbox", "exec", "--", "no-such-command-xyz"],
        ["sandbox", "exec", "--workspace", "/no/such/dir", "--", "true"],
        ["sandbox", "exec", "--network", "internet", "--", "true"],
        ["sandbox", "exec", "--memory-mb", "1", "--", "true"],
        ["sandbox", "exec", "--pids", "0", "--", "true"],
        ["sandbox", "exec", "--disk-mb", "0", "--", "true"],
        ["sandbox", "exec", "--nofile", "3", "--", "true"],
        ["sandbox", "exec", "--cpus", "-1", "--", "true"],
        ["sandbox", "exec", "--allow", "example.org", "--", "true"],
        ["judge", "score", "--task", "/no/such/task", "--workspace", "/tmp"],
        ["tasks", "check", "/no/such/tasks"],
        ["tasks", "generate", "no-such-family", "--n", "2", "--out", "/tmp/x-sparring"],
        ["traj", "search", "--store", "/no/such/store.db"],
        ["tasks", "import", "--format", "function-jsonl", "x.jsonl", "--out", "/tmp/x"],
        ["eval"],
    ],
)
def test_bad_input_gives_one_line_error(args):
    one_line_error(sp(*args))


def test_malformed_task_toml_and_unknown_policy(tmp_path, clamp_task):
    bad = tmp_path / "bad"
    (bad / "workspace").mkdir(parents=True)
    (bad / "task.toml").write_text("id = [unclosed\n")
    r = sp("judge", "score", "--task", bad, "--workspace", bad / "workspace")
    one_line_error(r)
    assert "malformed" in r.stderr
    r = sp("rollout", "--tasks", clamp_task.path, "--policy", "gpt-17", "--store", tmp_path / "s.db")
    one_line_error(r)
    assert "unknown policy spec" in r.stderr
    assert not (tmp_path / "s.db").exists()


def test_judge_score_contract(clamp_task, tmp_path):
    import shutil

    ws = tmp_path / "ws"
    shutil.copytree(clamp_task.workspace, ws)
    r = sp("judge", "score", "--json", "--task", clamp_task.path, "--workspace", ws)
    j = json.loads(r.stdout)
    assert r.returncode == 0 and j["reward"] == 0.0 and j["tests"] == {"passed": 2, "failed": 2, "errors": 0}
    shutil.copy(clamp_task.solution / "mathx" / "core.py", ws / "mathx" / "core.py")
    j = json.loads(sp("judge", "score", "--json", "--task", clamp_task.path, "--workspace", ws).stdout)
    assert (
        j["reward"] == 1.0
        and j["judge_version"].startswith("pytest-judge/")
        and set(j) >= {"components", "flags"}
    )


def test_rollout_and_traj_search_contract(clamp_task, tmp_path):
    store = tmp_path / "s.db"
    r = sp("rollout", "--json", "--tasks", clamp_task.path, "--policy", "oracle", "--group-size", "2",
           "--concurrency", "2", "--store", store)  # fmt: skip
    j = json.loads(r.stdout)
    assert r.returncode == 0, r.stderr
    assert j["requested"] == j["stored"] == 2 and j["statuses"] == {"ok": 2} and j["reward_mean"] == 1.0
    assert set(j) >= {"retried", "seconds"}
    j = json.loads(sp("traj", "search", "--json", "--store", store, "--status", "ok").stdout)
    assert j["total"] == 2
    assert set(j["trajectories"][0]) >= {"id", "task_id", "status", "reward", "flags", "attempts"}


def test_traj_show_and_replay(clamp_task, tmp_path):
    store = tmp_path / "s.db"
    assert sp("rollout", "--tasks", clamp_task.path, "--policy", "oracle", "--store", store).returncode == 0
    tid = json.loads(sp("traj", "search", "--json", "--store", store).stdout)["trajectories"][0]["id"]
    r = sp("traj", "show", tid, "--store", store)
    assert r.returncode == 0 and "str_replace" in r.stdout
    r = sp("traj", "replay", tid, "--json", "--store", store, "--tasks", clamp_task.path.parent)
    j = json.loads(r.stdout)
    assert r.returncode == 0 and j["identical"] and j["steps"] == 5 and j["reward_replayed"] == 1.0
