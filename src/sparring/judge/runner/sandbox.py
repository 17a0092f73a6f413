"""Run the judge's checks in a fresh sandbox over a pristine initial state.

Mounts (all read-only; the candidate's sandbox gets no writable judge mount):

    /judge/cfg      the launcher, the driver, their in-sandbox helpers and the
                    judge's pinned pytest.ini
    /judge/hidden   the task's hidden/ *without* its test files and without
                    .admission/: data the tests may read, never an expected value

The judge's tests themselves (hidden and pristine visible ones) reach the sandbox
only as probes (:mod:`sparring.judge.dynamic.probe`), on the launcher's stdin: every
assert there observes, and what it is compared with stays on the host.

Order: (1) the reference phase, in a sandbox that has never run candidate code and never will
before it ends: the reference solution is written; with dynamic tests the driver computes reference
outputs, and where the judge has no trace of the reference yet, the probes run on it (the trace says
which sites each test observes, and how often); (2) in a fresh sandbox, or the same one after a
``reset()`` when nothing of the candidate has run in it yet, the agent's diff is applied; (3) the
launcher runs the probes; (4) the driver runs the candidate on the same inputs. Every wall time is
measured here, outside the sandbox. A sandbox's reset is the host's and is verified (sandbox/isolation/sweep.py,
sandbox/isolation/init_state.py), but the reference's outputs are what the candidate is held to: they never
come from a sandbox a candidate could have prepared.

Whose fault a broken sandbox is: one that fails before the candidate's run starts (its diff applied,
its job sent) is the judge's (``sandbox_failed``); one whose exec server or channel dies after it is
the candidate's, as a crash of the test run is: :attr:`RunOutput.sandbox_killed` is set and the
judge scores it 0 with the flag ``sandbox_killed``.

Warm pool (:class:`JudgePool`, for throughput): instead of a fresh sandbox per
judgement, sandboxes of the same task are reused, with a full ``reset()``
between judgements (every process killed; the workspace's copy-on-write layer,
/tmp and the home directory discarded) and the judge's read-only mounts staged
once per task. Candidates run only in the pool's candidate sandboxes; the
reference phase runs only in its *reference* sandboxes (a pool of their own,
which never run anything but reference solutions), beside the candidate's run
when the candidate's probes do not wait for the trace. It is used only with a
backend whose reset discards everything (overlay mode); otherwise every
judgement gets a fresh sandbox as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from sparring.errors import SandboxError
from sparring.judge.base import JudgeRunError
from sparring.judge.inside import module_files
from sparring.judge.static.hacks import is_test_path
from sparring.sandbox.base import ExecResult, Sandbox, SandboxBackend, SandboxSpec, WorkspaceDiff
from sparring.sandbox.pool import resets_completely
from sparring.sandbox.storage.workspace import MAX_DIFF_BYTES
from sparring.tasks import taskfs
from sparring.tasks.loader import Task
from sparring.tasks.sandbox_spec import spec_for_task

JUDGE_DISK_HEADROOM_MB = 64
"""Room the judge's own files (probes, bytecode) always have, whatever the candidate's diff holds."""


def judge_disk_mb(task_disk_mb: int) -> int:
    """The judge sandbox's disk quota: the task's, and at least the most a diff may carry plus the judge's
    headroom.

    With the task's own quota, a diff that filled the agent's disk filled the judge's too, and the
    launcher died writing its probes before ``start``: the candidate's full disk read as the judge's
    fault (``judge_error``, retried, never penalised)."""
    return max(task_disk_mb, min(task_disk_mb, MAX_DIFF_BYTES >> 20) + JUDGE_DISK_HEADROOM_MB)


PYTEST_INI = "[pytest]\naddopts =\nconsider_namespace_packages = false\nxfail_strict = false\n"
PYTHON = "python"


def _aliases(sb: Sandbox) -> list[str]:
    """The other path ``sb`` shows the workspace at (an image's /testbed): the candidate's code there too."""
    alias = getattr(getattr(sb, "spec", None), "workspace_alias", None)
    return [alias] if isinstance(alias, str) and alias else []


def launcher_argv(sb: Sandbox) -> list[str]:
    """The launcher's command line: everything it needs before its job (it configures pytest first).
    ``-S``: the launcher runs the site set-up itself, with the candidate's code refused until its start."""
    return [PYTHON, "-s", "-S", "/judge/cfg/judge_launcher.py", "/workspace", PROBE_ROOT, *_aliases(sb)]


@dataclass
class RunOutput:
    """What the sandbox runs produced, before any interpretation."""

    applied: bool = True
    apply_error: str = ""
    pytest: ExecResult | None = None
    pytest_wall_s: float = 0.0
    reference_pytest: ExecResult | None = None
    """The probes' run on the reference solution (only when a trace was asked for)."""
    reference: list[dict[str, Any]] | None = None
    candidate: list[dict[str, Any]] | None = None
    sandbox_killed: str = ""
    """Why the sandbox died after the candidate's run had started (its exec server or channel): the
    candidate's doing, scored 0 with the flag ``sandbox_killed``; empty when it did not."""
    timings: dict[str, float] = field(default_factory=dict)


PROBE_ROOT = "/tmp/sparring-judge"
ADMISSION_DIR = ".admission"


def is_collected(rel: str) -> bool:
    """A file the judge's pytest collects (its python_files patterns)."""
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(".py") and (name.startswith("test_") or name.endswith("_test.py"))


def regression_files(task: Task) -> dict[str, bytes]:
    """The task's own test files, as they are in the pristine initial state (regular files only: a link
    is never read through on the host, see :mod:`sparring.tasks.taskfs`)."""

    def want(rel: str) -> bool:
        return (rel.endswith(".py") and is_test_path(rel) and rel.rsplit("/", 1)[-1] != "conftest.py"
                and "__pycache__" not in rel)  # fmt: skip

    return taskfs.files(task.workspace, want)


def hidden_test_files(task: Task) -> dict[str, bytes]:
    """The hidden test files the judge collects (never mounted: they reach the sandbox as probes)."""
    return taskfs.files(
        task.hidden, lambda rel: is_collected(rel) and not rel.startswith(ADMISSION_DIR + "/")
    )


def _stage(work: Path, task: Task) -> tuple[Path, Path]:
    cfg = work / "cfg"
    cfg.mkdir()
    pkg = resources.files("sparring.judge.inside")
    for name in module_files():
        (cfg / name).write_bytes(pkg.joinpath(name).read_bytes())
    (cfg / "pytest.ini").write_text(PYTEST_INI)
    view = work / "hidden"
    view.mkdir()
    for e, data in taskfs.walk(task.hidden, lambda e: not is_collected(e.rel)):
        if e.rel == ADMISSION_DIR or e.rel.startswith(ADMISSION_DIR + "/"):
            continue
        if e.kind == "dir":
            (view / e.rel).mkdir(parents=True, exist_ok=True)
        elif data is not None:  # regular files only: links and the rest are not staged
            (view / e.rel).parent.mkdir(parents=True, exist_ok=True)
            (view / e.rel).write_bytes(data)
    return cfg, view


class JudgePool:
    """Warm judge sandboxes per task, reset between judgements; at most ``max_idle`` idle per task.

    With ``prestart`` (the default), a sandbox the pool makes or resets gets its launcher started
    at once: the interpreter comes up, imports pytest, configures it and starts its session while the
    sandbox waits for its next judgement, then blocks reading its job (:mod:`sparring.judge.inside.judge_launcher`).
    The launcher is started before any of the candidate's files exist and reads nothing of /workspace
    until its job arrives, so the run is the one a cold start would make; it is used once, and the reset
    after the judgement kills it with everything else.

    Which sandboxes get one: until anyone announces judgements (:meth:`expect`), every sandbox made or
    reset. Once announced (the rollout scheduler announces each sample's judgement when its rollout
    starts), a reset sandbox gets one only while more judgements of its task are expected than launchers
    of it wait, and an announcement starts one in an idle sandbox of its task that has none. A training
    run judges each task of an iteration a few times and then maybe never again: without the
    announcements a third of its prestarted launchers (an interpreter and pytest's import each) waited in
    sandboxes nobody took again and died unused.

    Close it when done (``await pool.close()``); judges sharing one pool share its sandboxes.
    """

    def __init__(
        self,
        backend: SandboxBackend,
        max_idle: int = 2,
        max_size: int | None = None,
        prestart: bool = True,
        reference_max_size: int | None = None,
    ) -> None:
        """``max_size`` bounds the candidates' sandboxes, ``reference_max_size`` (default: the same) the
        reference sandboxes; a judgement holds at most one of each."""
        from sparring.sandbox.pool import SandboxPool

        self.backend = backend
        self.enabled = getattr(backend, "mode", "copy") == "overlay"
        self.prestart = prestart
        self._pool = SandboxPool(backend, max_idle=max_idle, max_size=max_size, on_ready=self.ready)
        # Never given a candidate: a reference solution's outputs must not come from a sandbox a candidate
        # ran in, however thorough its reset.
        self._references = SandboxPool(
            backend,
            max_idle=max_idle,
            max_size=max_size if reference_max_size is None else reference_max_size,
        )
        self._root = Path(tempfile.mkdtemp(prefix="sparring-judge-pool-"))
        self._staged: dict[str, tuple[Path, Path]] = {}
        self._warm: dict[str, Any] = {}
        self._announced = False
        self._expected: dict[str, int] = {}  # task key -> judgements announced and not yet begun
        self._task_of: dict[str, str] = {}  # sandbox id -> the task key it judges
        self._spec_for_task: dict[str, SandboxSpec] = {}  # task key -> its judge sandboxes' spec
        self.judgements = 0
        self.warm_launches = 0
        self.prestarts = 0
        self.reference_runs = 0

    def stage(self, task: Task) -> tuple[Path, Path]:
        """The judge's mounts for ``task``, staged once (same paths, so the sandbox spec and pool key repeat)."""
        key = self.task_key(task)
        if key not in self._staged:
            d = self._root / f"t{len(self._staged)}"
            d.mkdir()
            self._staged[key] = _stage(d, task)
        return self._staged[key]

    @staticmethod
    def task_key(task: Task) -> str:
        """The pool's name for ``task``: its staged mounts, expected judgements and sandboxes go by it."""
        return f"{task.id}@{task.digest}"

    def _count_expected(self, key: str, n: int) -> int:
        """Add ``n`` to ``key``'s expected judgements (never below 0; a key at 0 is dropped); the new count."""
        left = max(0, self._expected.get(key, 0) + n)
        if left:
            self._expected[key] = left
        else:
            self._expected.pop(key, None)
        return left

    def expect(self, task: Task, n: int = 1) -> None:
        """``n`` more judgements of ``task`` are coming (a negative ``n``: that many announced will not);
        an idle sandbox of the task without a launcher gets one now."""
        key = self.task_key(task)
        self._announced = True
        if not self._count_expected(key, n):
            return
        spec = self._spec_for_task.get(key)
        if spec is None:
            return
        for sb in self._pool.idle(spec):
            if not self._wanted(key):
                break
            if sb.id not in self._warm:
                self._start(sb)

    def _wanted(self, key: str) -> bool:
        """Whether a launcher for ``key`` would be used: more judgements expected than launchers waiting."""
        waiting = sum(1 for sid, w in self._warm.items() if self._task_of.get(sid) == key and w.alive)
        return self._expected.get(key, 0) > waiting

    async def acquire(self, spec: SandboxSpec, task: Task | None = None) -> Sandbox:
        """A sandbox for a judgement of ``task`` (its expected judgements count one down)."""
        self.judgements += 1
        key = self.task_key(task) if task is not None else None
        if key is not None:
            self._spec_for_task[key] = spec
            self._count_expected(key, -1)
        sb = await self._pool.acquire_spec(spec)
        if key is not None:
            self._task_of[sb.id] = key
        return sb

    async def in_reference_sandbox(
        self, spec: SandboxSpec, run: Callable[[Sandbox], Awaitable[None]]
    ) -> None:
        """``run`` in one of the pool's reference sandboxes (they run nothing but reference solutions), then
        give it back (reset). Its failures are the judge's: a SandboxError becomes ``sandbox_failed``."""
        try:
            sb = await self._references.acquire_spec(spec)
        except SandboxError as e:
            raise JudgeRunError("sandbox_failed", f"reference sandbox failed to start: {e}") from None
        self.reference_runs += 1
        broken = True
        try:
            await run(sb)
            broken = False
        except SandboxError as e:
            raise JudgeRunError("sandbox_failed", f"reference sandbox failed: {e}") from None
        finally:
            await self._references.release(sb, broken=broken)

    def ready(self, sb: Sandbox) -> None:
        """Prestart ``sb``'s launcher (``sb`` was just made or reset) where it will be used (see the class);
        a no-op where the backend cannot."""
        stale = self._warm.pop(sb.id, None)
        if stale is not None:
            stale.cancel()
        # Sandboxes the pool closed on its own (evicted, surplus) take their unused launchers with them.
        for sid in [k for k, w in self._warm.items() if not w.alive]:
            del self._warm[sid]
        for sid in [k for k in self._task_of if k != sb.id and not self._pool.holds(k)]:
            del self._task_of[sid]
        key = self._task_of.get(sb.id)  # None: just made, for the judgement that asked for it
        if self._announced and key is not None and not self._wanted(key):
            return
        self._start(sb)

    def _start(self, sb: Sandbox) -> None:
        start = getattr(sb, "prestart", None)
        if self.prestart and start is not None:
            self._warm[sb.id] = start(launcher_argv(sb))
            self.prestarts += 1

    def take_launcher(self, sb: Sandbox) -> Any:
        """``sb``'s prestarted launcher if it is still waiting, once; else None (run it cold)."""
        warm = self._warm.pop(sb.id, None)
        if warm is not None and warm.alive:
            self.warm_launches += 1
            return warm
        return None

    async def release(self, sb: Sandbox, broken: bool = False) -> None:
        self._warm.pop(sb.id, None)  # unused, it dies in the reset (or with the sandbox)
        await self._pool.release(sb, broken=broken)  # resets it, or closes it when broken or surplus

    @property
    def max_alive(self) -> int:
        """Most candidate sandboxes alive at once."""
        return self._pool.max_alive

    @property
    def reference_max_alive(self) -> int:
        """Most reference sandboxes alive at once."""
        return self._references.max_alive

    async def close(self) -> None:
        await self._pool.close()
        await self._references.close()
        shutil.rmtree(self._root, ignore_errors=True)


def judge_pool_for(backend: SandboxBackend, concurrency: int) -> JudgePool:
    """The warm judge of a long-lived loop (training, a node actor) judging up to ``concurrency`` at once:
    at most two idle sandboxes per task, ``2 * concurrency`` candidate sandboxes and ``concurrency``
    reference sandboxes in all (each judgement holds one candidate sandbox and, for a while, one
    reference sandbox), so the idle sandboxes of many tasks stay few."""
    c = max(1, concurrency)
    return JudgePool(backend, max_idle=2, max_size=2 * c, reference_max_size=c)


async def apply_diff(sb: Sandbox, diff: WorkspaceDiff) -> None:
    for rel in diff.deleted:
        with contextlib.suppress(FileNotFoundError):
            await sb.delete_file(rel)
    for rel, data in sorted(diff.files.items()):
        await sb.write_file(rel, data)


async def run_driver(sb: Sandbox, job: dict[str, Any], timeout: float) -> list[dict[str, Any]] | None:
    r = await sb.exec([PYTHON, "-s", "-S", "/judge/cfg/judge_driver.py", "/workspace", *_aliases(sb)], timeout=timeout,
                      stdin=(json.dumps(job) + "\n").encode())  # fmt: skip
    return await asyncio.to_thread(driver_results, r.stdout)  # the candidate's bytes: read off the loop


def driver_results(stdout: str) -> list[dict[str, Any]] | None:
    """The driver's results: its last line, a JSON list (None if it is not one). Linear in ``stdout``,
    which the sandbox caps at 1 MiB."""
    try:
        out = json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else None
    except (ValueError, RecursionError):  # the candidate's process wrote it: unparseable is no answer
        return None
    return out if isinstance(out, list) else None


def launcher_job(probe_files: dict[str, str], args: list[str], seed: int, allow_binary: bool) -> bytes:
    """The launcher's stdin: probes, what to collect, the order seed; no secret (there is none to keep)."""
    job = {"files": probe_files, "copy": {"hidden": "/judge/hidden"}, "args": args,
           "seed": seed, "allow_binary": allow_binary}  # fmt: skip
    return (json.dumps(job) + "\n").encode()


async def run_launcher(sb: Sandbox, job: bytes, timeout: float, pool: JudgePool | None = None) -> ExecResult:
    """The launcher on ``job``: the pool's prestarted one for ``sb`` when there is one, else a fresh one."""
    warm = pool.take_launcher(sb) if pool is not None else None
    if warm is not None:
        result: ExecResult = await warm.run(job, timeout)
        return result
    return await sb.exec(launcher_argv(sb), timeout=timeout, stdin=job)


async def run_in_sandbox(
    backend: SandboxBackend,
    task: Task,
    diff: WorkspaceDiff,
    job: bytes | Callable[[RunOutput], bytes],
    *,
    dynamic_job: dict[str, Any] | None,
    reference: WorkspaceDiff | None,
    reference_job: bytes | None = None,
    limits: bool = True,
    pool: JudgePool | None = None,
) -> RunOutput:
    """Everything of one judgement that executes code, in one fresh (or freshly reset, pooled) sandbox.

    ``job`` is the launcher's stdin for the candidate's run, or a function of what the reference phase
    produced that makes it (the candidate's probes depend on the reference's trace); with
    ``reference_job``, the probes also run on the reference solution first (for the judge's trace of it)."""
    pooled = pool if pool is not None and pool.enabled else None
    work = Path(tempfile.mkdtemp(prefix="sparring-judge-"))
    out = RunOutput()
    try:
        cfg, view = pooled.stage(task) if pooled is not None else _stage(work, task)
        lim = task.spec.limits
        agent = spec_for_task(task)
        spec = SandboxSpec(
            workspace=task.workspace,
            workspace_alias=agent.workspace_alias,  # the image's path of it (/testbed), as the agent had
            extra_ro={"/judge/hidden": view, "/judge/cfg": cfg},
            memory_mb=lim.memory_mb if limits else None,
            pids=lim.pids if limits else None,
            cpus=lim.cpus if limits else None,
            disk_mb=judge_disk_mb(lim.disk_mb),
            network=lim.network,  # loopback where the task declares it: its checker polls a service it starts
            environment=agent.environment,  # the agent's layer: same interpreter, same pins
            image=task.spec.environment.image,  # and the agent's image: its system (and, locally, its Python)
        )
        t = time.perf_counter()
        try:
            sb = await pooled.acquire(spec, task) if pooled is not None else await backend.create(spec)
        except SandboxError as e:
            raise JudgeRunError("sandbox_failed", f"judge sandbox failed to start: {e}") from None
        out.timings["create_s"] = time.perf_counter() - t
        broken = True
        started = False  # from the candidate's run on, a dying sandbox is the candidate's doing
        try:
            timeout = task.spec.judge.timeout_s

            async def fresh(sb: Sandbox) -> Sandbox:
                """``sb`` as new for the candidate: reset, or replaced where reset would leave /tmp behind."""
                if resets_completely(sb):
                    await sb.reset()
                    return sb
                await sb.close()  # reset would leave the last phase's /tmp (its bytecode, the probes)
                return await backend.create(spec)

            async def reference_phase(rsb: Sandbox) -> None:
                """The reference's dynamic outputs, then (when asked) the probes on it for the trace."""
                assert reference is not None
                await apply_diff(rsb, reference)
                if dynamic_job is not None:
                    out.reference = await run_driver(rsb, dynamic_job, timeout)
                    if out.reference is None:
                        raise JudgeRunError(
                            "reference_failed", "the reference solution produced no dynamic-test outputs"
                        )
                if reference_job is not None:
                    out.reference_pytest = await run_launcher(rsb, reference_job, timeout)

            # The reference runs where no candidate ever ran: first, in this fresh sandbox (then reset),
            # or in a reference sandbox of the pool, beside the candidate's run unless the candidate's
            # probes need its trace first. The candidate's prestarted launcher is still waiting either way.
            wanted = reference is not None and (dynamic_job is not None or reference_job is not None)
            beside: asyncio.Task[None] | None = None
            if wanted and pooled is None:
                await reference_phase(sb)
                sb = await fresh(sb)
            elif wanted and pooled is not None and reference_job is not None:
                await pooled.in_reference_sandbox(spec, reference_phase)
            elif wanted and pooled is not None:
                beside = asyncio.create_task(pooled.in_reference_sandbox(spec, reference_phase))
            try:
                # The candidate's job reads the reference's report first (CPU work): off the event loop.
                stdin = await asyncio.to_thread(job, out) if callable(job) else job
                try:
                    await apply_diff(sb, diff)
                except (OSError, SandboxError) as e:
                    out.applied, out.apply_error = False, str(e)
                    broken = False
                    return out
                started = True
                t = time.perf_counter()
                out.pytest = await run_launcher(sb, stdin, timeout, pooled)
                out.pytest_wall_s = time.perf_counter() - t
                if dynamic_job is not None and not out.pytest.timed_out:
                    t = time.perf_counter()
                    out.candidate = await run_driver(sb, dynamic_job, timeout)
                    out.timings["dynamic_s"] = time.perf_counter() - t
                if beside is not None:
                    await beside
            finally:
                if beside is not None and not beside.done():
                    beside.cancel()
                    with contextlib.suppress(BaseException):
                        await beside
            broken = False
            return out
        except SandboxError as e:
            if not started:
                raise JudgeRunError("sandbox_failed", f"judge sandbox failed: {e}") from None
            out.sandbox_killed = f"the sandbox died while the candidate's code ran: {e}"
            return out
        finally:
            t = time.perf_counter()
            if pooled is not None:
                await pooled.release(sb, broken=broken)  # reset before anyone else gets it
            else:
                await sb.close()
            out.timings["close_s"] = time.perf_counter() - t
    finally:
        shutil.rmtree(work, ignore_errors=True)
