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

Warm pool (:class:`JudgePool`, for throughput): instead of a fresh sandbox per
judgement, sandboxes of the same task are reused, with a full ``reset()``
between judgements (every process killed; the workspace's copy-on-write layer,
/tmp and the home directory discarded) and the judge's read-only mounts staged
once per task. It is used only with a backend whose reset discards everything
(overlay mode); otherwise every judgement gets a fresh sandbox as before.
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


class JudgePool:
    """Warm judge sandboxes per task, reset between judgements; at most ``max_idle`` idle per task.

    Close it when done (``await pool.close()``); judges sharing one pool share its sandboxes.
    """

    def __init__(self, backend: SandboxBackend, max_idle: int = 2, max_size: int | None = None) -> None:
        from sparring.sandbox.pool import SandboxPool

        self.backend = backend
        self.enabled = getattr(backend, "mode", "copy") == "overlay"
        self._pool = SandboxPool(backend, max_idle=max_idle, max_size=max_size, pin_workspaces=False)
        self._root = Path(tempfile.mkdtemp(prefix="sparring-judge-pool-"))
        self._staged: dict[str, tuple[Path, Path | None]] = {}
        self.judgements = 0

    def stage(self, task: Task) -> tuple[Path, Path | None]:
        """The judge's mounts for ``task``, staged once (same paths, so the sandbox spec and pool key repeat)."""
        key = f"{task.id}@{task.digest}"
        if key not in self._staged:
            d = self._root / f"t{len(self._staged)}"
            d.mkdir()
            self._staged[key] = _stage(d, task)
        return self._staged[key]

    async def acquire(self, spec: SandboxSpec) -> Sandbox:
        self.judgements += 1
        return await self._pool.acquire_spec(spec)

    async def release(self, sb: Sandbox, broken: bool = False) -> None:
        await self._pool.release(sb, broken=broken)  # resets it, or closes it when broken or surplus

    @property
    def max_alive(self) -> int:
        """Most sandboxes alive at once."""
        return self._pool.max_alive

    async def close(self) -> None:
        await self._pool.close()
        shutil.rmtree(self._root, ignore_errors=True)


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
    pool: JudgePool | None = None,
) -> RunOutput:
    """Everything of one judgement that executes code, in one fresh (or freshly reset, pooled) sandbox."""
    pooled = pool if pool is not None and pool.enabled else None
    work = Path(tempfile.mkdtemp(prefix="sparring-judge-"))
    out = RunOutput()
    try:
        cfg, reg = pooled.stage(task) if pooled is not None else _stage(work, task)
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
            cpus=lim.cpus if limits else None,
            disk_mb=max(lim.disk_mb, 64),
        )
        t = time.perf_counter()
        try:
            sb = await pooled.acquire(spec) if pooled is not None else await backend.create(spec)
        except SandboxError as e:
            raise JudgeRunError("sandbox_failed", f"judge sandbox failed to start: {e}") from None
        out.timings["create_s"] = time.perf_counter() - t
        broken = True
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
                broken = False
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
            broken = False
            return out
        except SandboxError as e:
            raise JudgeRunError("sandbox_failed", f"judge sandbox failed: {e}") from None
        finally:
            t = time.perf_counter()
            if pooled is not None:
                await pooled.release(sb, broken=broken)  # reset before anyone else gets it
            else:
                await sb.close()
            out.timings["close_s"] = time.perf_counter() - t
    finally:
        shutil.rmtree(work, ignore_errors=True)
