"""The ``code-repair`` family: one injected bug in a small, real, tested package.

Each task starts from a base package of :mod:`code_repair_sources` and changes
exactly one AST node (see :mod:`code_repair_sources.mutations`). A mutant is
kept only if it compiles and the base's own suite both fails and still partly
passes on it, checked by really running pytest on it in a fresh process. The
agent sees the buggy package and about half of the suite (including at least
one test that fails); the judge runs the whole suite from ``hidden/``;
``solution/`` holds the original module. Every package file is written through
``ast.unparse`` so that the only difference between the initial state and the
solution is the bug itself, not formatting or lost comments.

Validation dominates the cost, so suites run in batches: one worker process
per batch imports pytest once and forks a fresh child per suite run (the same
``pytest -q -p no:cacheprovider`` run, minus the interpreter start), and batches
run concurrently. Selection is still deterministic: candidates are taken in a
seed-defined order, and validity depends only on the candidate.
"""

from __future__ import annotations

import ast
import asyncio
import hashlib
import json
import os
import random
import tempfile
import threading
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sparring import pyast
from sparring.errors import ConfigError, TaskError
from sparring.sandbox.base import WORKSPACE, SandboxBackend, SandboxSpec
from sparring.sandbox.config import LocalBackendConfig, OCIBackendConfig, make_backend
from sparring.tasks.environment import layer_for, pinned_requirements
from sparring.tasks.families.code_repair_sources import BaseSource, load_bases
from sparring.tasks.families.code_repair_sources.mutations import (
    DIFFICULTY,
    FAMILY,
    Mutation,
    apply_mutation,
    enumerate_mutations,
    normalise,
)
from sparring.tasks.loader import Task, write_task
from sparring.tasks.spec import Environment, JudgeSpec, Provenance, TaskSpec

VERSION = "1"
GENERATOR = f"{FAMILY}/{VERSION}"
_MAX_BATCH = 6
_WORKSPACE_INI = "[pytest]\npythonpath = .\n"
_TIMEOUT_EXIT = 97
_T = TypeVar("_T")

# Validation-only conftest: a per-test alarm and a memory cap, so that a mutant
# that hangs or explodes is rejected in seconds. Never written into a task.
_GUARD_CONFTEST = f"""import os
import resource
import signal

import pytest


def _expired(signum, frame):
    os._exit({_TIMEOUT_EXIT})


signal.signal(signal.SIGALRM, _expired)
_soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
if _hard == resource.RLIM_INFINITY or _hard > 2 << 30:
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, _hard))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    signal.setitimer(signal.ITIMER_REAL, 3.0)
    yield
    signal.setitimer(signal.ITIMER_REAL, 0)
"""

# The batch worker: imports pytest once, then runs each job in a forked child
# (cwd = the job's workspace, which goes first on sys.path) with a timeout.
_DRIVER = r"""
import importlib, json, os, signal, sys, time

import pytest
import _pytest.config

for _name in _pytest.config.default_plugins:
    try:
        importlib.import_module("_pytest." + _name)
    except ImportError:
        pass


def _child(job):
    fd = os.open(os.devnull, os.O_RDWR)
    for k in (0, 1, 2):
        os.dup2(fd, k)
    os.chdir(job["cwd"])
    sys.path.insert(0, job["cwd"])
    os.environ["PYTHONPATH"] = job["cwd"]
    return int(pytest.main(job["args"]))


def _run(job):
    pid = os.fork()
    if pid == 0:
        code = 98
        try:
            code = _child(job)
        finally:
            os._exit(code)
    deadline = time.monotonic() + job["timeout"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -9
        time.sleep(0.005)


def _outcomes(job, code):
    import xml.etree.ElementTree as ET

    if code not in (0, 1) or not os.path.isfile(job["junit"]):
        return None
    out = {}
    for case in ET.parse(job["junit"]).getroot().iter("testcase"):
        tags = {child.tag for child in case}
        outcome = "failed" if tags & {"failure", "error"} else "skipped" if "skipped" in tags else "passed"
        node_id = job["test_file"] + "::" + case.get("name")
        if out.get(node_id, "passed") == "passed":
            out[node_id] = outcome
    return out


with open(sys.argv[1]) as f:
    jobs = json.load(f)
print(json.dumps([_outcomes(job, _run(job)) for job in jobs]))
"""


# --------------------------------------------------------------------------- bases and suite runs


@dataclass(frozen=True)
class PreparedBase:
    """A base with its files in canonical (unparsed) form and its candidate mutations."""

    source: BaseSource
    files: dict[str, str]
    mutations: tuple[Mutation, ...]

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def hidden_name(self) -> str:
        return f"test_hidden_{self.source.module}.py"


def prepare(base: BaseSource) -> PreparedBase:
    files = {rel: normalise(src) for rel, src in sorted(base.files.items())}
    mutations = tuple(
        m
        for rel, src in files.items()
        if Path(rel).name != "__init__.py"
        for m in enumerate_mutations(base.name, rel, src)
    )
    return PreparedBase(base, files, mutations)


@dataclass(frozen=True)
class SuiteJob:
    """One suite run: package files (relative to the workspace) and a test file to run against them."""

    files: dict[str, str]
    test_file: str
    tests: str


def _write_tree(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def _job_dir(root: Path, i: int, job: SuiteJob, timeout_s: float) -> dict[str, object]:
    """Write job i under root (the sandbox's /workspace); its description in sandbox paths."""
    _write_tree(root / f"job{i}" / "workspace", job.files)
    hidden = {job.test_file: job.tests, "conftest.py": _GUARD_CONFTEST, "pytest.ini": "[pytest]\n"}
    _write_tree(root / f"job{i}" / "hidden", hidden)
    d = f"{WORKSPACE}/job{i}"
    junit = f"/tmp/junit{i}.xml"
    args = [
        "-q",
        "-p",
        "no:cacheprovider",
        "--assert=plain",
        f"--junitxml={junit}",
        f"{d}/hidden/{job.test_file}",
    ]
    return {
        "cwd": f"{d}/workspace",
        "args": args,
        "timeout": timeout_s,
        "junit": junit,
        "test_file": job.test_file,
    }


BackendConfig = LocalBackendConfig | OCIBackendConfig
_BACKENDS: dict[tuple[int, BackendConfig | None], SandboxBackend] = {}
_BACKENDS_LOCK = threading.Lock()


def _backend(config: BackendConfig | None) -> SandboxBackend:
    """One sandbox backend per thread and configuration (each worker thread runs its own event loop);
    the spec names the family's pinned layer (no Sparring in it). ``None``: the default backend."""
    key = (threading.get_ident(), config)
    with _BACKENDS_LOCK:
        if key not in _BACKENDS:
            _BACKENDS[key] = make_backend(config)
        return _BACKENDS[key]


async def _run_in_sandbox(root: Path, limit_s: float, backend: BackendConfig | None) -> str:
    layer = layer_for(Environment(requirements=pinned_requirements()))
    spec = SandboxSpec(
        workspace=root, network="none", memory_mb=2048, pids=256, disk_mb=256, environment=layer.ref()
    )
    sb = await _backend(backend).create(spec)
    try:
        env = {"PYTHONHASHSEED": "0", "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        r = await sb.exec(["python", "-c", _DRIVER, f"{WORKSPACE}/jobs.json"], timeout=limit_s, env=env)
    finally:
        await sb.close()
    if r.exit_code != 0:
        raise TaskError(
            f"code-repair: the pytest runner failed in its sandbox (exit {r.exit_code}): {r.stderr[-300:]}"
        )
    return r.stdout


def run_suites(
    jobs: Sequence[SuiteJob], timeout_s: float = 30.0, backend: BackendConfig | None = None
) -> list[dict[str, str] | None]:
    """Run each job's tests as the judge would (cwd and PYTHONPATH = the workspace); per-test outcomes.

    The runs happen inside a sandbox of the ``backend`` configured (default: the
    local one; no network, memory and process limits, the family's environment
    layer): mutant code never runs on the host. An
    entry is None when that run did not finish normally (timeout, crash,
    collection error). Raises TaskError if the runner itself cannot work.
    """
    if not jobs:
        return []
    with tempfile.TemporaryDirectory(prefix="sparring-code-repair-") as tmp:
        root = Path(tmp)
        (root / "jobs.json").write_text(
            json.dumps([_job_dir(root, i, j, timeout_s) for i, j in enumerate(jobs)])
        )
        stdout = asyncio.run(_run_in_sandbox(root, timeout_s * len(jobs) + 30, backend))
        try:
            results = json.loads(stdout.strip().splitlines()[-1])
        except (ValueError, IndexError) as e:
            raise TaskError(f"code-repair: the pytest runner's output was not readable ({e})") from None
        if not isinstance(results, list) or len(results) != len(jobs):
            raise TaskError("code-repair: the pytest runner reported the wrong number of runs")
        return results


BASE_PASS_RATE = 0.8


def baseline_tests(base: PreparedBase, outcomes: dict[str, str] | None) -> tuple[str, ...] | None:
    """The suite's tests that pass on the original code, or None if the base is unusable.

    As in SWE-smith, a base is kept only if more than 80 % of its tests pass before
    mutation; the ones that fail there are left out of the task's hidden test list.
    """
    if not outcomes:
        return None
    passing = tuple(t for t, v in outcomes.items() if v == "passed")
    return passing if len(passing) > BASE_PASS_RATE * len(outcomes) else None


# --------------------------------------------------------------------------- validation


@dataclass(frozen=True)
class Candidate:
    """A validated mutant: its package files and the suite's tests that fail on it."""

    base: PreparedBase
    mutation: Mutation
    files: dict[str, str]
    failing: tuple[str, ...]


def mutant_files(base: PreparedBase, mutation: Mutation) -> dict[str, str] | None:
    """The package files with the mutation applied, or None if it changes nothing or does not compile."""
    original = base.files[mutation.path]
    mutated = apply_mutation(original, mutation) + "\n"
    if mutated == original:
        return None
    try:
        compile(mutated, mutation.path, "exec")
    except SyntaxError:
        return None
    return {**base.files, mutation.path: mutated}


def validate_batch(
    items: Sequence[tuple[PreparedBase, Mutation]],
    test_ids: dict[str, tuple[str, ...]],
    timeout_s: float,
    files: Sequence[dict[str, str] | None] | None = None,
    backend: BackendConfig | None = None,
) -> list[Candidate | None]:
    """Each mutant if some, but not all, of its base's suite fails on it; else None.

    ``files`` (from :func:`mutant_files`) should be computed on the calling thread: CPython
    3.11's AST constructor is not thread-safe ("AST constructor recursion depth mismatch"),
    so parsing and compiling never happen in the worker threads that only wait on pytest.
    """
    if files is None:
        files = [mutant_files(b, m) for b, m in items]
    jobs = [SuiteJob(f, b.hidden_name, b.source.tests) for (b, _), f in zip(items, files, strict=True) if f]
    runs = iter(run_suites(jobs, timeout_s, backend))
    out: list[Candidate | None] = []
    for (base, m), f in zip(items, files, strict=True):
        outcomes = next(runs) if f else None
        ids = test_ids[base.name]
        if f is None or outcomes is None or not set(ids) <= set(outcomes):
            out.append(None)
            continue
        failing = tuple(t for t in ids if outcomes[t] != "passed")
        out.append(Candidate(base, m, f, failing) if 0 < len(failing) < len(ids) else None)
    return out


# --------------------------------------------------------------------------- selection


def derive_seed(seed: int, *parts: object) -> int:
    """A 60-bit sub-seed derived from (seed, parts); stable across runs and platforms."""
    text = ":".join([GENERATOR, str(seed), *map(str, parts)])
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


def _interleave(lanes: Sequence[Sequence[_T]]) -> list[_T]:
    depth = max((len(lane) for lane in lanes), default=0)
    return [lane[r] for r in range(depth) for lane in lanes if r < len(lane)]


def _lane(base: PreparedBase, seed: int) -> list[Mutation]:
    """A base's candidates in the seed's order, mutation kinds taking turns."""
    rng = random.Random(derive_seed(seed, "order", base.name))
    groups: dict[str, list[Mutation]] = {}
    for m in base.mutations:
        groups.setdefault(m.kind, []).append(m)
    kinds = sorted(groups)
    rng.shuffle(kinds)
    for kind in kinds:
        rng.shuffle(groups[kind])
    return _interleave([groups[k] for k in kinds])


def candidate_order(bases: Sequence[PreparedBase], seed: int) -> list[tuple[PreparedBase, Mutation]]:
    """All candidates in the seed's order: bases take turns, each in its own shuffled order."""
    lanes = [[(b, m) for m in _lane(b, seed)] for b in bases]
    random.Random(derive_seed(seed, "lanes")).shuffle(lanes)
    return _interleave(lanes)


@dataclass
class _Picked:
    """What one selection has accepted so far (local to one generate call)."""

    locations: set[tuple[str, str]]
    sources: set[str]
    ids: set[str]
    chosen: list[Candidate]

    def fresh(self, m: Mutation) -> bool:
        return (m.base, m.location) not in self.locations and m.task_id not in self.ids

    def take(self, c: Candidate) -> None:
        m = c.mutation
        text = hashlib.sha256(f"{m.base}|{m.path}|{c.files[m.path]}".encode()).hexdigest()
        if self.fresh(m) and text not in self.sources:
            self.locations.add((m.base, m.location))
            self.sources.add(text)
            self.ids.add(m.task_id)
            self.chosen.append(c)


def select(
    bases: Sequence[PreparedBase],
    test_ids: dict[str, tuple[str, ...]],
    n: int,
    seed: int,
    pool: ThreadPoolExecutor,
    workers: int,
    timeout_s: float,
    backend: BackendConfig | None = None,
) -> list[Candidate]:
    """The first n valid mutants with distinct locations, in candidate order.

    Batches are validated ahead in parallel, but results are consumed strictly
    in order, and a candidate is skipped early only if an earlier accepted one
    already took its location, so the outcome does not depend on timing.
    """
    order = candidate_order(bases, seed)
    picked = _Picked(set(), set(), set(), [])
    pending: deque[tuple[Future[list[Candidate | None]], int]] = deque()
    pos = 0
    try:
        while len(picked.chosen) < n and (pos < len(order) or pending):
            while pos < len(order) and len({id(f) for f, _ in pending}) < workers:
                size = max(1, min(_MAX_BATCH, (n - len(picked.chosen)) // workers))
                batch: list[tuple[PreparedBase, Mutation]] = []
                while pos < len(order) and len(batch) < size:
                    if picked.fresh(order[pos][1]):
                        batch.append(order[pos])
                    pos += 1
                if batch:
                    mutants = [mutant_files(b, m) for b, m in batch]  # AST work stays on this thread
                    future = pool.submit(validate_batch, batch, test_ids, timeout_s, mutants, backend)
                    pending.extend((future, i) for i in range(len(batch)))
            if pending:
                future, i = pending.popleft()
                candidate = future.result()[i]
                if candidate is not None:
                    picked.take(candidate)
    finally:
        for future, _ in pending:
            future.cancel()
    if len(picked.chosen) < n:
        raise ConfigError(
            f"code-repair can produce only {len(picked.chosen)} distinct tasks; asked for n={n}"
        )
    return picked.chosen


# --------------------------------------------------------------------------- task writing


def visible_suite(tests: str, keep: set[str]) -> str:
    """The suite with only the test functions named in keep (helpers and imports stay)."""
    tree = pyast.parse(tests)
    lines = tests.splitlines()
    parts: list[str] = []
    prev_def = False
    for node in tree.body:
        is_def = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        name = getattr(node, "name", "")
        if is_def and name.startswith("test") and name not in keep:
            continue
        start = min([d.lineno for d in getattr(node, "decorator_list", [])] + [node.lineno])
        if parts:
            parts.append("\n\n\n" if is_def or prev_def else "\n")
        parts.append("\n".join(lines[start - 1 : node.end_lineno]))
        prev_def = is_def
    return "".join(parts) + "\n"


def pick_visible(test_ids: tuple[str, ...], failing: tuple[str, ...], rng: random.Random) -> list[str]:
    """About half of the suite, always including at least one test that fails on the mutant."""
    must = rng.choice(failing)
    rest = [t for t in test_ids if t != must]
    rng.shuffle(rest)
    chosen = {must, *rest[: max(1, len(test_ids) // 2) - 1]}
    return [t for t in test_ids if t in chosen]


def _spec(c: Candidate, test_ids: tuple[str, ...], sub_seed: int) -> TaskSpec:
    src, m = c.base.source, c.mutation
    visible = f"tests/test_{src.module}.py"
    instruction = (
        f"The Python package `{src.name}` in the workspace ({src.summary}) has a bug: some of the tests in "
        f"{visible} fail. Find the bug in the package's source code under {src.name}/ and fix it so that "
        "the package behaves as its docstrings and tests describe. Do not edit, add, skip or delete any "
        "tests or test configuration. Run the visible tests with run_tests (or `python -m pytest tests` "
        "from the workspace root), then submit."
    )
    success = (
        f"All {len(test_ids)} hidden tests in {c.base.hidden_name} (the full test suite of `{src.name}`, "
        f"a superset of {visible}) pass when pytest runs them against the fixed workspace, with the tests "
        "and test configuration unchanged."
    )
    judge = JudgeSpec.model_validate(
        {"kind": "pytest", "hidden_tests": list(test_ids), "weights": {"all_pass": 1.0}}
    )
    return TaskSpec.model_validate(
        {
            "id": m.task_id,
            "family": FAMILY,
            "instruction": instruction,
            "success_criteria": success,
            "judge": judge,
            "difficulty": DIFFICULTY[m.kind],
            "tags": [m.kind, src.name],
            "provenance": Provenance(generator=GENERATOR, seed=sub_seed, source=src.name),
            "environment": Environment(requirements=pinned_requirements()),
        }
    )


def write_candidate(c: Candidate, test_ids: tuple[str, ...], index: int, seed: int, out: Path) -> Task:
    """Write task ``index`` of the set to out/<task id>/."""
    sub_seed = derive_seed(seed, "task", index)
    visible = pick_visible(test_ids, c.failing, random.Random(sub_seed))
    keep = {t.split("::", 1)[1].split("[", 1)[0] for t in visible}
    src = c.base.source
    workspace: dict[str, str | bytes] = {
        **c.files,
        f"tests/test_{src.module}.py": visible_suite(src.tests, keep),
        "pytest.ini": _WORKSPACE_INI,
    }
    hidden: dict[str, str | bytes] = {c.base.hidden_name: src.tests}
    solution: dict[str, str | bytes] = {c.mutation.path: c.base.files[c.mutation.path]}
    spec = _spec(c, test_ids, sub_seed)
    return write_task(Path(out) / spec.id, spec, workspace, hidden, solution)


def check_n(n: object) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"n must be a positive integer, got {n!r}")
    return n


@dataclass(frozen=True)
class CodeRepairGenerator:
    """Generates code-repair tasks; stateless, so one instance serves every call."""

    name: str = FAMILY
    version: str = VERSION
    workers: int | None = None
    timeout_s: float = 30.0
    backend: BackendConfig | None = None
    """The sandbox backend mutants are validated in (``sandbox.config``; None: the local one)."""

    def bases(self) -> list[PreparedBase]:
        return [prepare(b) for b in load_bases()]

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        """Write n tasks with distinct mutation sites to out/<id>/; the same (n, seed) gives the same bytes."""
        check_n(n)
        bases = self.bases()
        capacity = len({(m.base, m.location) for b in bases for m in b.mutations})
        if n > capacity:
            raise ConfigError(f"code-repair has only {capacity} mutation sites; asked for n={n}")
        workers = self.workers or max(2, min(8, 2 * (os.cpu_count() or 1)))
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="code-repair") as pool:
            test_ids = self._baselines(bases, pool, workers)
            bases = [b for b in bases if b.name in test_ids]
            if not bases:
                raise TaskError("code-repair: no base passes more than 80 % of its own tests")
            chosen = select(bases, test_ids, n, seed, pool, workers, self.timeout_s, self.backend)
        return [write_candidate(c, test_ids[c.base.name], i, seed, Path(out)) for i, c in enumerate(chosen)]

    def _baselines(
        self, bases: list[PreparedBase], pool: ThreadPoolExecutor, workers: int
    ) -> dict[str, tuple[str, ...]]:
        """Run every base's suite on its original code, in parallel batches; test ids per base."""
        chunks = [bases[i::workers] for i in range(workers) if bases[i::workers]]
        jobs = [[SuiteJob(b.files, b.hidden_name, b.source.tests) for b in chunk] for chunk in chunks]
        runs = pool.map(lambda js: run_suites(js, self.timeout_s, self.backend), jobs)
        out: dict[str, tuple[str, ...]] = {}
        for chunk, results in zip(chunks, runs, strict=True):
            for b, outcomes in zip(chunk, results, strict=True):
                ids = baseline_tests(b, outcomes)
                if ids is not None:
                    out[b.name] = ids
        return out
