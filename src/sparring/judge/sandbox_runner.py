"""Run the judge's checks in a fresh sandbox over a pristine initial state.

Mounts (all read-only; the candidate's sandbox gets no writable judge mount):

    /judge/cfg      the launcher, the driver and the judge's pinned pytest.ini
    /judge/hidden   the task's hidden/ (added now, never in the agent's sandbox)
    /judge/regress  pristine copies of the task's own (visible) tests

Order inside one sandbox: (1) with dynamic tests, the reference solution is
written and the driver computes reference outputs; ``reset()`` discards it;
(2) the agent's diff is applied; (3) the launcher runs the hidden and
regression tests; (4) the driver runs the candidate on the same inputs. Every
wall time is measured here, outside the sandbox.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from sparring.errors import SandboxError
from sparring.judge.base import JudgeRunError
from sparring.judge.hacks import is_test_path
from sparring.sandbox.base import ExecResult, Sandbox, SandboxBackend, SandboxSpec, WorkspaceDiff
from sparring.tasks.loader import Task

PYTEST_INI = (
    "[pytest]\naddopts =\nconsider_namespace_packages = false\nxfail_strict = false\n"
    "enable_assertion_pass_hook = true\n"
)
PYTHON = "python"


@dataclass
class RunOutput:
    """What the sandbox runs produced, before any interpretation."""

    applied: bool = True
    apply_error: str = ""
    pytest: ExecResult | None = None
    pytest_wall_s: float = 0.0
    key: bytes = b""
    reference: list[dict[str, Any]] | None = None
    candidate: list[dict[str, Any]] | None = None
    has_regress: bool = False
    timings: dict[str, float] = field(default_factory=dict)


def regression_files(task: Task) -> dict[str, bytes]:
    """The task's own test files, as they are in the pristine initial state."""
    out: dict[str, bytes] = {}
    if task.workspace.is_dir():
        for p in sorted(task.workspace.rglob("*.py")):
            rel = p.relative_to(task.workspace).as_posix()
            if is_test_path(rel) and p.name != "conftest.py" and "__pycache__" not in rel:
                out[rel] = p.read_bytes()
    return out


def _stage(work: Path, task: Task) -> tuple[Path, Path | None]:
    cfg = work / "cfg"
    cfg.mkdir()
    pkg = resources.files("sparring.judge")
    for name in ("sandbox_pytest.py", "sandbox_driver.py"):
        (cfg / name).write_bytes(pkg.joinpath(name).read_bytes())
    (cfg / "pytest.ini").write_text(PYTEST_INI)
    files = regression_files(task)
    if not files:
        return cfg, None
    reg = work / "regress"
    for rel, data in files.items():
        (reg / rel).parent.mkdir(parents=True, exist_ok=True)
        (reg / rel).write_bytes(data)
    return cfg, reg


async def apply_diff(sb: Sandbox, diff: WorkspaceDiff) -> None:
    for rel in diff.deleted:
        with contextlib.suppress(FileNotFoundError):
            await sb.delete_file(rel)
    for rel, data in sorted(diff.files.items()):
        await sb.write_file(rel, data)


async def run_driver(sb: Sandbox, job: dict[str, Any], timeout: float) -> list[dict[str, Any]] | None:
    r = await sb.exec([PYTHON, "-s", "/judge/cfg/sandbox_driver.py", "/workspace"], timeout=timeout,
                      stdin=(json.dumps(job) + "\n").encode())  # fmt: skip
    try:
        out = json.loads(r.stdout.strip().splitlines()[-1]) if r.stdout.strip() else None
    except json.JSONDecodeError:
        return None
    return out if isinstance(out, list) else None


async def run_in_sandbox(
    backend: SandboxBackend,
    task: Task,
    diff: WorkspaceDiff,
    testdirs: list[str],
    *,
    shuffle_seed: int,
    dynamic_job: dict[str, Any] | None,
    reference: WorkspaceDiff | None,
    limits: bool = True,
) -> RunOutput:
    """Everything of one judgement that executes code, in one fresh sandbox."""
    work = Path(tempfile.mkdtemp(prefix="sparring-judge-"))
    out = RunOutput()
    try:
        cfg, reg = _stage(work, task)
        out.has_regress = reg is not None
        mounts = {"/judge/hidden": task.hidden, "/judge/cfg": cfg}
        if reg is not None:
            mounts["/judge/regress"] = reg
        else:
            testdirs = [d for d in testdirs if d != "/judge/regress"]
        lim = task.spec.limits
        spec = SandboxSpec(
            workspace=task.workspace,
            extra_ro=mounts,
            memory_mb=lim.memory_mb if limits else None,
            pids=lim.pids if limits else None,
            disk_mb=max(lim.disk_mb, 64),
        )
        t = time.perf_counter()
        try:
            sb = await backend.create(spec)
        except SandboxError as e:
            raise JudgeRunError("sandbox_failed", f"judge sandbox failed to start: {e}") from None
        out.timings["create_s"] = time.perf_counter() - t
        try:
            timeout = task.spec.judge.timeout_s
            if dynamic_job is not None and reference is not None:
                await apply_diff(sb, reference)
                out.reference = await run_driver(sb, dynamic_job, timeout)
                if out.reference is None:
                    raise JudgeRunError(
                        "reference_failed", "the reference solution produced no dynamic-test outputs"
                    )
                await sb.reset()
            try:
                await apply_diff(sb, diff)
            except (OSError, SandboxError) as e:
                out.applied, out.apply_error = False, str(e)
                return out
            out.key = secrets.token_bytes(32)
            stdin = json.dumps({"key": out.key.hex(), "seed": shuffle_seed}) + "\n"
            t = time.perf_counter()
            out.pytest = await sb.exec([PYTHON, "-s", "/judge/cfg/sandbox_pytest.py", "/workspace", *testdirs],
                                       timeout=timeout, stdin=stdin.encode())  # fmt: skip
            out.pytest_wall_s = time.perf_counter() - t
            if dynamic_job is not None and not out.pytest.timed_out:
                t = time.perf_counter()
                out.candidate = await run_driver(sb, dynamic_job, timeout)
                out.timings["dynamic_s"] = time.perf_counter() - t
            return out
        except SandboxError as e:
            raise JudgeRunError("sandbox_failed", f"judge sandbox failed: {e}") from None
        finally:
            t = time.perf_counter()
            await sb.close()
            out.timings["close_s"] = time.perf_counter() - t
    finally:
        shutil.rmtree(work, ignore_errors=True)
