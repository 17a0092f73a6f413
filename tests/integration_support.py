"""Helpers of the adapter tests (sparring.integrations): reference actions, `sparring judge score` as the
reward's ground truth, and a check for sandboxes left on the host."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from sparring.tasks.loader import Task

SPARRING = [str(Path(sys.executable).parent / "sparring")]


def call(i: int, name: str, **args: Any) -> dict[str, Any]:
    """One assistant message making one tool call."""
    fn = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}],
    }


def reference_actions(task: Task) -> list[dict[str, Any]]:
    """The tool calls writing the task's reference solution, then submit."""
    files, deleted = task.solution_files()
    assert not deleted
    out = [
        call(i, "write_file", path=p, content=b.decode()) for i, (p, b) in enumerate(sorted(files.items()))
    ]
    return [*out, call(len(out), "submit")]


def judge_score_cli(task_dir: Path, files: dict[str, bytes], out: Path) -> dict[str, Any]:
    """`sparring judge score --json` on the task's initial workspace with ``files`` written over it."""
    shutil.copytree(task_dir / "workspace", out)
    for rel, data in files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    r = subprocess.run([*SPARRING, "judge", "score", "--task", str(task_dir), "--workspace", str(out), "--json"],
                       capture_output=True, text=True, timeout=300, env=os.environ.copy())  # fmt: skip
    assert r.returncode == 0, r.stderr
    result: dict[str, Any] = json.loads(r.stdout)
    return result


def _home(root: Path) -> Path:
    """Where a backend rooted at ``root`` keeps its sandboxes (``root/sandboxes`` links to it)."""
    return (root / "sandboxes").resolve()


def sandbox_ids(root: Path) -> set[str]:
    """The ids of the sandboxes living under a backend root now."""
    return {p.name.removeprefix("sb-") for p in _home(root).glob("sb-*")}


def leftovers(root: Path, ids: set[str]) -> list[str]:
    """What sandboxes ``ids`` (made under ``root``) left on the host: dirs, mounts, cgroups."""
    home = _home(root)
    out = [f"dir {p}" for p in home.glob("sb-*")]
    with open("/proc/self/mountinfo") as f:
        out += [f"mount {m}" for ln in f for m in [ln.split()[4]] if m.startswith(f"{home}/sb-")]
    cg = Path("/sys/fs/cgroup")
    out += [f"cgroup {c}" for i in ids for c in [*cg.glob(f"sparring/{i}"), *cg.glob(f"*/sparring/{i}")]]
    return out
