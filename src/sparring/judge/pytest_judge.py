"""The pytest judge: score the agent's diff on a pristine copy with the hidden tests.

1. A fresh sandbox over the task's *initial* workspace (never the agent's sandbox).
2. The agent's diff is written into it; hidden/ is mounted read-only at
   /judge/hidden, outside /workspace, only now.
3. pytest runs the hidden tests with the judge's own config (``-c``), no
   conftest files (``--noconftest``), and writes a JUnit report to a directory
   the judge reads from outside; every expected test id must be in it.
4. Components -> reward via :func:`compose_reward`. Time is measured outside.

The judge never trusts exit codes or stdout for the score.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from pathlib import Path

from sparring.errors import JudgeError, SandboxError
from sparring.judge.base import JudgeResult
from sparring.judge.junit import parse_junit
from sparring.judge.reward import components_from_tests, compose_reward
from sparring.rollout.trajectory import TestCounts
from sparring.sandbox.base import SandboxBackend, SandboxSpec, WorkspaceDiff
from sparring.tasks.loader import Task

VERSION = "pytest-judge/1"
PYTEST_INI = "[pytest]\naddopts =\nconsider_namespace_packages = false\n"
TAMPER_NAMES = ("conftest.py", "pytest.ini", "tox.ini", "setup.cfg", "pyproject.toml", "sitecustomize.py", "usercustomize.py")


def tampering(diff: WorkspaceDiff) -> list[str]:
    """Paths of the diff that touch tests or test configuration."""
    touched = [*diff.files, *diff.deleted]
    return sorted(
        p for p in touched if p.startswith("tests/") or p.split("/")[-1] in TAMPER_NAMES or p.endswith(".pth")
    )


class PytestJudge:
    """Judge kind ``pytest``. Stateless; safe to share across concurrent rollouts."""

    version = VERSION

    def __init__(self, backend: SandboxBackend, limits: bool = True) -> None:
        self.backend = backend
        self.limits = limits

    async def score(self, task: Task, diff: WorkspaceDiff) -> JudgeResult:
        t0 = time.perf_counter()
        work = Path(tempfile.mkdtemp(prefix="sparring-judge-"))
        cfg, out = work / "cfg", work / "out"
        cfg.mkdir()
        out.mkdir(mode=0o777)
        (cfg / "pytest.ini").write_text(PYTEST_INI)
        lim = task.spec.limits
        spec = SandboxSpec(
            workspace=task.workspace,
            extra_ro={"/judge/hidden": task.hidden, "/judge/cfg": cfg},
            extra_rw={"/judge/out": out},
            memory_mb=lim.memory_mb if self.limits else None,
            pids=lim.pids if self.limits else None,
            disk_mb=max(lim.disk_mb, 64),
            env={"PYTHONPATH": "/workspace"},
        )
        try:
            sb = await self.backend.create(spec)
        except SandboxError as e:
            shutil.rmtree(work, ignore_errors=True)
            raise JudgeError(f"judge sandbox failed to start: {e}") from None
        try:
            try:
                for rel in diff.deleted:
                    with contextlib.suppress(FileNotFoundError):
                        await sb.delete_file(rel)
                for rel, data in sorted(diff.files.items()):
                    await sb.write_file(rel, data)
            except OSError as e:
                return self._result(task, {}, ["diff_not_applicable"], t0, f"diff could not be applied: {e}")
            cmd = [
                "python", "-m", "pytest", "/judge/hidden", "-q", "-p", "no:cacheprovider", "--noconftest",
                "-c", "/judge/cfg/pytest.ini", "--rootdir", "/judge/hidden",
                "--junitxml", "/judge/out/report.xml", "-o", "junit_family=xunit2",
            ]  # fmt: skip
            r = await sb.exec(cmd, timeout=task.spec.judge.timeout_s)
            log = (r.stdout + r.stderr)[-4000:]
            flags: list[str] = []
            if tampering(diff):
                flags.append("test_tampering")
            if r.timed_out:
                flags.append("judge_timeout")
            report = out / "report.xml"
            outcomes: dict[str, str] = {}
            if report.is_file():
                try:
                    outcomes = parse_junit(report)
                except Exception:
                    flags.append("no_test_report")
            else:
                flags.append("no_test_report")
            if not outcomes and "no_test_report" not in flags:
                flags.append("tests_not_run")
            return self._result(task, outcomes, flags, t0, log)
        except SandboxError as e:
            raise JudgeError(f"judge sandbox failed: {e}") from None
        finally:
            await sb.close()
            shutil.rmtree(work, ignore_errors=True)

    def _result(self, task: Task, outcomes: dict[str, str], flags: list[str], t0: float, log: str) -> JudgeResult:
        expected = list(task.spec.judge.hidden_tests)
        per_test = dict(outcomes)
        for t in expected:
            per_test.setdefault(t, "missing")
        comps = components_from_tests(expected, outcomes)
        counts = TestCounts(
            passed=sum(1 for v in per_test.values() if v == "passed"),
            failed=sum(1 for v in per_test.values() if v in ("failed", "skipped", "missing")),
            errors=sum(1 for v in per_test.values() if v == "error"),
        )
        return JudgeResult(
            reward=compose_reward(comps, task.spec.judge.weights, flags),
            components=comps,
            flags=sorted(set(flags)),
            judge_version=self.version,
            tests=counts,
            per_test=per_test,
            duration_ms=(time.perf_counter() - t0) * 1000,
            log=log,
        )
