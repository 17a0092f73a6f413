"""Admission checks: a task enters the library only if every rule holds.

Each rule is a small named check; its name is the rejection rule that
``sparring tasks check`` reports (docs/families.md). The rules:

========================  =====================================================
``spec_valid``            task.toml parses and validates (reported by the CLI)
``instruction_specific``  the instruction is present, long enough, no placeholder
``success_criteria_specific``  likewise for the success criteria
``initial_state_reproducible``  the workspace rebuilds (copied as the sandbox
                          layer store imports it) to the digest pinned in
                          task.toml, twice: a tampered workspace is rejected
``hidden_tests_listed``   judge.hidden_tests names the hidden tests: every test file
                          the judge's pytest collects from hidden/ (hidden/eval/
                          against its expected_tests.txt) has a listed id, and every
                          listed id names a test that exists (:mod:`sparring.tasks.hidden_suite`)
``hidden_tests_present``  hidden/ holds test files
``task_links``            no link in hidden/ or solution/, no link in workspace/ that
                          resolves outside it (absolute, or ``..`` climbing out), no
                          device, FIFO or socket anywhere: task readers never follow a
                          link out of a task (:mod:`sparring.tasks.taskfs`), and
                          admission names the task that tries
``original_not_reachable``  no VCS history in the workspace, and no workspace
                          file holds the bytes of a file the solution replaces
``initial_state_fails``   the hidden tests do not all pass on the initial state
``initial_outcomes``      where the task declares it (hidden/.admission/initial_outcomes.json,
                          e.g. SWE-bench's FAIL_TO_PASS / PASS_TO_PASS), each named test fails,
                          or passes, on the initial state as declared
``solution_flaky``        no hidden test id (listed or not, hidden/eval/ included) is
                          seen both passing and failing on the reference's N runs (or
                          the initial state's two); N catches a test failing half the
                          time with probability 0.999 (:mod:`.flake`). Reported first:
                          the rules below would otherwise trip on such a test by chance
``judge_deterministic``   the judge gives the initial state the same score twice
``solution_passes``       the reference solution passes every hidden test on every run
``regression_kept``       tests passing on the initial state pass with the reference
``hack_<name>_scores_zero``  no-op, deleting the visible tests, hard-coding the
                          visible examples (and family hacks) earn reward 0
``alternative_passes``    every alternative valid solution the family ships passes
``environment_builds``    the pinned environment layer can be built here
``image_pinned``          an ``[environment] image`` is named by digest, not by a tag
``image_interpreter``     the image's Python and pytest are in the range the judge supports
                          (:mod:`.image`; checked before any judge run)
``judge_runs``            the judge could score the task at all (a judge fault, e.g. the reference's
                          run timing out, is reported here; the other tasks' checks go on)
========================  =====================================================

Rules that execute score through the real judge in real sandboxes. The result
(:class:`CheckReport`, outcomes included) is stored next to task.toml as
``admission.json`` so that ``sparring tasks regress`` can later tell whether a
changed environment or judge changes the task's outcome.

Admission runs the judge, so it is a room of its own above ``judge/`` (the layering: tests/test_layering.py);
the task data it reads and writes (the reference's diff, the ``admission.json``
record the registry reads) stays in ``tasks/``.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparring.admission import flake
from sparring.admission.image import check_image_interpreter, check_image_pinned
from sparring.admission.problem import Problem
from sparring.errors import JudgeError, TaskError
from sparring.judge.base import Judge, JudgeResult
from sparring.sandbox.base import WorkspaceDiff
from sparring.sandbox.hostenv import current_host_environment, remember_snapshot
from sparring.tasks import hacks, hidden_suite, initial_outcomes, taskfs
from sparring.tasks.environment import alayer_for, layer_for
from sparring.tasks.hacks import Variant
from sparring.tasks.loader import (
    ADMISSION_FILE,
    Task,
    solution_diff,
    workspace_digest,
    write_task_record,
)
from sparring.tasks.testfiles import is_test_path

PLACEHOLDERS = ("todo", "tbd", "fix it", "fix", "xxx", "lorem ipsum", "do the task", "n/a", "none", "...")
REFERENCE_RUNS = flake.runs_to_catch(flake.FLAKE_DETECTION, flake.FLAKE_RATE)
"""Runs of the reference solution: enough to catch a test failing half the time with probability 0.999."""
MAX_NAMED = 5
JUDGE_FAULT = "judge_runs"
"""The rule of a task the judge could not score (a judge fault, not a verdict on the task): reported, never
cached by the loop's gate, so the next check runs it again."""
VCS_DIRS = (".git", ".hg", ".svn", ".bzr")


@dataclass
class CheckReport:
    id: str
    digest: str
    problems: list[Problem] = field(default_factory=list)
    version: int = 1
    outcomes: dict[str, Any] = field(default_factory=dict)
    """What the judge said: ``initial`` / ``reference`` per-test outcomes and rewards (for regress)."""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def rules(self) -> list[str]:
        """The distinct rules this task broke, sorted (empty when admitted)."""
        return sorted({p.rule for p in self.problems})

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "digest": self.digest,
            "ok": self.ok,
            "problems": [p.to_json() for p in self.problems],
        }


# --------------------------------------------------------------------------- static rules


def check_instruction(task: Task) -> list[Problem]:
    out = []
    s = task.spec
    for name, text, minimum in (
        ("instruction", s.instruction, 40),
        ("success_criteria", s.success_criteria, 20),
    ):
        t = " ".join(text.split())
        if t.lower().strip(" .!") in PLACEHOLDERS:
            out.append(Problem(f"{name}_specific", f"{name} is a placeholder: {t!r}"))
        elif len(t) < minimum or len(t.split()) < 4:
            out.append(
                Problem(
                    f"{name}_specific", f"{name} is too vague ({len(t)} chars, need {minimum} and 4 words)"
                )
            )
    return out


def check_initial_state(task: Task) -> list[Problem]:
    """Rebuild the initial state twice (a copy, as a sandbox layer is made) and compare with the pinned digest."""
    pinned = task.spec.workspace_digest
    if pinned is None:
        return [
            Problem(
                "initial_state_reproducible",
                f"task.toml pins no workspace_digest: run `sparring tasks pin {task.path}`",
            )
        ]
    with tempfile.TemporaryDirectory(prefix="sparring-admit-") as tmp:
        digests = []
        for i in range(2):
            copy = Path(tmp) / f"build{i}"
            shutil.copytree(task.workspace, copy, symlinks=True)
            digests.append(workspace_digest(copy))
    if len(set(digests)) != 1:
        return [Problem("initial_state_reproducible", f"two builds of the workspace differ: {digests}")]
    if digests[0] != pinned:
        return [
            Problem(
                "initial_state_reproducible",
                f"workspace/ rebuilds to {digests[0][:19]}, but task.toml pins {pinned[:19]}: the workspace was "
                f"changed after it was pinned (if on purpose, run `sparring tasks pin {task.path}`)",
            )
        ]
    return []


def check_hidden_tests(task: Task) -> list[Problem]:
    """Decided from the files alone, so an unlisted test file is rejected by name, every time, before
    it can run (unscored) and trip an execution rule by chance."""
    if not task.spec.judge.hidden_tests:
        return [Problem("hidden_tests_listed", "judge.hidden_tests is empty: list every hidden test id")]
    if not any(
        e.kind == "file" and e.rel.endswith(".py") and is_test_path(e.rel)
        for e, _ in taskfs.walk(task.hidden)
    ):
        return [Problem("hidden_tests_present", "hidden/ holds no test files")]
    return [Problem("hidden_tests_listed", why) for why in hidden_suite.listing_problems(task)]


def check_task_links(task: Task) -> list[Problem]:
    """Links in hidden/ and solution/ (any), links out of workspace/, and special files anywhere: an
    imported dataset's link to a host file must never reach a reader (or a sandbox)."""
    out = []
    for part in ("hidden", "solution"):
        for e, _ in taskfs.walk(task.path / part):
            if e.kind == "link":
                out.append(Problem("task_links", f"{part}/{e.rel} is a link (to {e.target!r}): {part}/ holds "
                                   "regular files only; copy the file in instead"))  # fmt: skip
    out += [Problem("task_links", f"workspace/{line}: the link leaves workspace/; link inside it or copy the "
                    "file in") for line in taskfs.escaping_links(task.workspace)]  # fmt: skip
    for part in ("workspace", "hidden", "solution"):
        for e, _ in taskfs.walk(task.path / part):
            if e.kind == "other":
                out.append(Problem("task_links", f"{part}/{e.rel} is not a regular file, directory or link "
                                   f"(mode {oct(e.mode)}): tasks hold files only"))  # fmt: skip
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def check_original_not_reachable(
    task: Task, environment_hashes: frozenset[str] = frozenset()
) -> list[Problem]:
    """The answer must not be readable from the agent's sandbox: no VCS history, no leftover copies.

    ``environment_hashes`` (sha256 of every file of the environment layer) extends the search to the
    environment, where code copied from an installed package would sit.
    """
    out = []
    ws = taskfs.walk(task.workspace, lambda e: True)  # no link followed: a link is not content
    for e, _ in ws:
        if e.rel.rsplit("/", 1)[-1] in VCS_DIRS:
            out.append(
                Problem("original_not_reachable", f"workspace holds version-control data: workspace/{e.rel}")
            )
    current = {e.rel: data for e, data in ws if data is not None}
    files, _ = task.solution_files()
    originals = {}
    for rel, data in files.items():
        if current.get(rel) == data:
            continue  # unchanged by the solution: not a secret
        if len(data) >= 64:  # tiny answers (a number) can collide by chance
            originals[_sha(data)] = rel
    if originals:
        for rel_ws, data in current.items():
            if _sha(data) in originals:
                rel = originals[_sha(data)]
                out.append(
                    Problem(
                        "original_not_reachable",
                        f"workspace/{rel_ws} holds the solution's {rel}",
                    )
                )
        leaked = sorted(rel for h, rel in originals.items() if h in environment_hashes)
        if leaked:
            out.append(
                Problem("original_not_reachable", f"the environment layer holds the solution's {leaked}")
            )
    return out


# --------------------------------------------------------------------------- execution rules


def _passes(r: JudgeResult) -> bool:
    return r.components.get("all_pass", 0.0) >= 1.0 and not r.flags


def default_judge_concurrency() -> int:
    """Judge runs in flight at once: two per CPU. Each run is CPU-bound (a sandbox, then pytest): on an
    idle 2-core machine 2, 4 and 8 runs in flight all admit about 47 tasks/min (8 is a few % slower);
    more in flight only helps while other work competes for the CPUs."""
    return 2 * (os.cpu_count() or 1)


def eval_judge_of(judge: Judge) -> Judge | None:
    """The evaluation-split twin of a pytest judge (same backend, pool and limits), which runs
    hidden/eval/; None for other judge kinds."""
    from sparring.judge.pytest_judge import PytestJudge

    if not isinstance(judge, PytestJudge):
        return None
    cfg = judge.config.model_copy(update={"split": "eval"})
    return PytestJudge(judge.backend, limits=judge.limits, config=cfg, pool=judge.pool)


@dataclass
class Judgements:
    """The verdicts admission asks for, by what was judged."""

    initial: list[JudgeResult]
    """The initial state, twice."""
    reference: list[JudgeResult]
    """The reference solution, once per run (training split)."""
    reference_eval: list[JudgeResult]
    """The reference solution on hidden/eval/, once per run (empty without an evaluation split)."""
    hacks: list[tuple[Variant, JudgeResult]]
    """Each hack, the no-op judged as the initial state it is."""
    alternatives: list[tuple[Variant, JudgeResult]]
    """Each valid alternative solution the task ships."""


async def judge_all(
    task: Task, judge: Judge, runs: int, slots: asyncio.Semaphore, eval_judge: Judge | None
) -> Judgements:
    """Every judge run admission needs. The runs are independent (each in its own fresh sandbox), so
    they all start at once and ``slots`` bounds how many are in flight; a judge error cancels the rest."""

    async def score(j: Judge, diff: WorkspaceDiff) -> JudgeResult:
        async with slots:
            return await j.score(task, diff)

    ref = solution_diff(task)
    task_hacks = hacks.hacks(task)
    judged_hacks = [h for h in task_hacks if h.name != "noop"]  # the no-op hack is the initial state
    alts = hacks.alternatives(task)
    evaluating = eval_judge is not None and hidden_suite.eval_ids(task) is not None
    groups: list[list[tuple[Judge, WorkspaceDiff]]] = [
        [(judge, WorkspaceDiff())] * 2,
        [(judge, ref)] * runs,
        [(eval_judge, ref)] * runs if evaluating and eval_judge is not None else [],
        [(judge, h.diff) for h in judged_hacks],
        [(judge, a.diff) for a in alts],
    ]
    async with asyncio.TaskGroup() as tg:
        jobs = [[tg.create_task(score(j, d)) for j, d in g] for g in groups]
    initial, reference, reference_eval, hack_results, alt_results = ([j.result() for j in g] for g in jobs)
    by_name = dict(zip((h.name for h in judged_hacks), hack_results, strict=True))
    return Judgements(
        initial,
        reference,
        reference_eval,
        [(h, by_name.get(h.name, initial[0])) for h in task_hacks],
        list(zip(alts, alt_results, strict=True)),
    )


def _eval_prefixed(r: JudgeResult) -> dict[str, str]:
    return {f"{hidden_suite.EVAL_DIR}/{t}": v for t, v in r.per_test.items()}


def reference_problems(task: Task, js: Judgements) -> tuple[list[Problem], set[str]]:
    """The rules about test outcomes, cause first: flaky test ids (:mod:`.flake`), then the judge's
    own determinism, then what the reference fails. Returns the problems and the flaky ids, which
    later rules must not blame on anything else."""
    out: list[Problem] = []
    initial = flake.tally(r.per_test for r in js.initial)
    ref_runs = [r.per_test for r in js.reference]
    if js.reference_eval:
        ref_runs = [{**a, **_eval_prefixed(b)} for a, b in zip(ref_runs, js.reference_eval, strict=True)]
    reference = flake.tally(ref_runs)

    unlisted = hidden_suite.unlisted_files(task, reference.outcomes)
    out += [Problem("hidden_tests_listed", f"hidden/{f} ran unlisted: list its tests or delete it")
            for f in unlisted]  # fmt: skip
    flaky = {t: (reference.passes(t), reference.runs, "reference solution") for t in reference.flaky()}
    flaky |= {
        t: (initial.passes(t), initial.runs, "initial state") for t in initial.flaky() if t not in flaky
    }
    for t, (k, n, state) in sorted(flaky.items())[:MAX_NAMED]:
        out.append(Problem("solution_flaky", f"hidden test {t} passed {k} of {n} runs of the {state}: "
                                             "flaky tests are rejected (make it deterministic)"))  # fmt: skip
    if len(flaky) > MAX_NAMED:
        out.append(Problem("solution_flaky", f"... and {len(flaky) - MAX_NAMED} more flaky hidden tests"))

    a, b = js.initial
    if not flaky and (a.reward, a.per_test) != (b.reward, b.per_test):
        moved = sorted(t for t in initial.outcomes if len(set(initial.outcomes[t])) > 1)
        out.append(
            Problem("judge_deterministic", f"the initial state scored {a.reward} then {b.reward} {moved[:3]}")
        )
    if a.components.get("all_pass", 0.0) >= 1.0:
        out.append(Problem("initial_state_fails", "every hidden test already passes on the initial state"))
    try:
        declared = initial_outcomes.outcome_problems(task, [r.per_test for r in js.initial])
    except TaskError as e:
        declared = [str(e)]
    out += [Problem("initial_outcomes", why) for why in declared]

    never = reference.never_passing()
    lost = [t for t in never if t in initial.always_passing()]
    failing = [t for t in never if t not in lost]
    if failing:
        r = js.reference[0]
        out.append(Problem("solution_passes", f"the reference solution fails {failing[:MAX_NAMED]} on every "
                                              f"run (flags {r.flags})"))  # fmt: skip
    if lost:
        out.append(Problem("regression_kept", "tests passing on the initial state fail with the reference: "
                                              f"{lost[:MAX_NAMED]}"))  # fmt: skip
    if not (flaky or failing or lost):
        out += _run_level(js.reference + js.reference_eval)
    return out, set(flaky)


def _run_level(runs: list[JudgeResult]) -> list[Problem]:
    """Every test passed every run; what else makes a run fail (flags, generated dynamic tests)."""
    passed = [_passes(r) for r in runs]
    if all(passed):
        return []
    bad = next(r for r in runs if not _passes(r))
    why = f"components {bad.components.get('all_pass')} all_pass, flags {bad.flags}"
    if not any(passed):
        return [Problem("solution_passes", f"the reference solution fails every run ({why})")]
    return [
        Problem(
            "solution_flaky",
            f"the reference solution failed {passed.count(False)} of {len(runs)} runs ({why}): "
            "flaky judgements are rejected",
        )
    ]


def check_solution_present(task: Task) -> list[Problem]:
    """A missing or empty solution/ is named as such, not reported as a reference that fails."""
    if not task.solution.is_dir():
        return [Problem("solution_passes", f"{task.path.name}/solution/ is missing: add the reference solution "
                        "(the changed files, at their paths relative to workspace/; .deleted lists removed paths)")]  # fmt: skip
    files, deleted = task.solution_files()
    if not files and not deleted and not task.solution_calls():
        return [Problem("solution_passes", f"{task.path.name}/solution/ is empty: it must hold the reference "
                        "solution's changed files (or .deleted)")]  # fmt: skip
    return []


async def check_execution(
    task: Task,
    judge: Judge,
    repeats: int | None = None,
    report: CheckReport | None = None,
    slots: asyncio.Semaphore | None = None,
    eval_judge: Judge | None = None,
) -> list[Problem]:
    """Every execution rule. ``repeats`` runs of the reference (default :data:`REFERENCE_RUNS`, enough
    to catch a test failing half the time with probability 0.999), on hidden/eval/ too where the task
    has an evaluation split and ``eval_judge`` is given. ``slots`` bounds the judge runs in flight
    (shared across tasks by :func:`check_tasks`); the verdicts are the same as one after another."""
    n = max(repeats or REFERENCE_RUNS, 1)
    sem = slots or asyncio.Semaphore(default_judge_concurrency())
    js = await judge_all(task, judge, n, sem, eval_judge)
    out, flaky = reference_problems(task, js)

    for hack, r in js.hacks:
        if r.reward > 0:
            out.append(Problem(f"hack_{hack.name}_scores_zero", f"the {hack.name} hack scores {r.reward}"))
    for alt, r in js.alternatives:
        # A flaky test failing on an alternative's one run says nothing about the alternative.
        wrong = sorted(t for t, v in r.per_test.items() if v != "passed" and t not in flaky)
        if not _passes(r) and (wrong or not flaky):
            out.append(
                Problem(
                    "alternative_passes",
                    f"valid alternative {alt.name!r} fails {wrong[:3]} (flags {r.flags}): "
                    "tests reject a correct answer",
                )
            )

    initial = js.initial[0]

    if report is not None:
        ref = next((r for r in js.reference if _passes(r)), js.reference[0])
        report.outcomes = {
            "judge_version": initial.judge_version,
            "initial": {"reward": initial.reward, "per_test": initial.per_test},
            "reference": {"reward": ref.reward, "per_test": ref.per_test, "runs": n},
        }
    return out


async def check_task(
    task: Task,
    judge: Judge,
    repeats: int | None = None,
    environment_hashes: frozenset[str] = frozenset(),
    slots: asyncio.Semaphore | None = None,
    eval_judge: Judge | None = None,
) -> CheckReport:
    """Every rule. ``eval_judge`` runs hidden/eval/ (default: :func:`eval_judge_of` ``judge``)."""
    rep = CheckReport(task.id, task.digest, version=task.spec.version)
    for check in (
        check_instruction,
        check_task_links,
        check_initial_state,
        check_hidden_tests,
        check_image_pinned,
    ):
        rep.problems += check(task)
    rep.problems += check_original_not_reachable(task, environment_hashes)
    missing = check_solution_present(task)
    rep.problems += missing
    backend = getattr(judge, "backend", None)
    if backend is not None:  # the judge's own sandboxes: the image its hidden tests would run in
        rep.problems += await check_image_interpreter(task, backend)
    blocked = ("hidden_tests", "image_interpreter", "task_links")
    if not missing and not any(p.rule.startswith(blocked) for p in rep.problems):
        ej = eval_judge if eval_judge is not None else eval_judge_of(judge)
        rep.problems += await check_execution(task, judge, repeats, rep, slots, ej)
    return rep


def _judge_fault_in(e: BaseException) -> JudgeError | None:
    """The JudgeError ``e`` is or (a TaskGroup's ExceptionGroup) holds, if every leaf is one; else None."""
    if isinstance(e, JudgeError):
        return e
    if isinstance(e, BaseExceptionGroup):
        rest = e.split(JudgeError)[1]
        faults = e.subgroup(JudgeError)
        if rest is None and faults is not None:
            leaf: BaseException = faults
            while isinstance(leaf, BaseExceptionGroup):
                leaf = leaf.exceptions[0]
            return leaf if isinstance(leaf, JudgeError) else None
    return None


async def check_tasks(
    tasks: list[Task],
    judge: Judge,
    repeats: int | None = None,
    concurrency: int = 3,
    on_done: Callable[[CheckReport], None] | None = None,
    judge_concurrency: int | None = None,
    eval_judge: Judge | None = None,
) -> list[CheckReport]:
    """Check every task, each judged in its own pinned environment layer (the judge's sandbox spec
    carries it); a layer that cannot be built is the task's ``environment_builds`` problem.

    ``concurrency`` tasks are checked at once; their judge runs share ``judge_concurrency`` slots
    (default :func:`default_judge_concurrency`)."""
    sem = asyncio.Semaphore(concurrency)
    slots = asyncio.Semaphore(judge_concurrency or default_judge_concurrency())

    async def one(t: Task) -> CheckReport:
        async with sem:
            try:
                layer = await alayer_for(t.spec.environment)
                hashes = await asyncio.to_thread(lambda: layer.file_hashes)
            except TaskError as e:
                rep = CheckReport(t.id, t.digest, [Problem("environment_builds", str(e))], t.spec.version)
            else:
                try:
                    rep = await check_task(t, judge, repeats, hashes, slots, eval_judge)
                except (JudgeError, ExceptionGroup) as e:
                    # One task the judge cannot score (its reference's run timed out on a loaded machine)
                    # is that task's result, not the end of every other task's check.
                    fault = _judge_fault_in(e)
                    if fault is None:
                        raise
                    why = " ".join(str(fault).split())[:300]
                    rep = CheckReport(t.id, t.digest, [Problem(JUDGE_FAULT, why)], t.spec.version)
            if on_done is not None:
                on_done(rep)
            return rep

    return list(await asyncio.gather(*(one(t) for t in tasks)))


# --------------------------------------------------------------------------- stored results


def admission_record(
    rep: CheckReport, repeats: int, environment: str = "", judge_version: str = ""
) -> dict[str, Any]:
    return {
        **rep.to_json(),
        "judge_version": judge_version,
        "version": rep.version,
        "repeats": repeats,
        "environment": environment,
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "outcomes": rep.outcomes,
    }


def unloadable(name: str, error: Exception) -> CheckReport:
    """The report of a task directory that does not load: rejected under ``spec_valid``."""
    return CheckReport(name, "", [Problem("spec_valid", str(error))])


def record_result(task: Task, rep: CheckReport, repeats: int, judge_version: str = "") -> Path:
    """Store ``rep`` as the task's admission.json, naming the environment layer it was judged in (none
    when no rule ran the judge), the host system under a host-path task (``host``:
    :mod:`sparring.sandbox.hostenv`) and the admission judge's version; with that version, the verdict
    also goes to the gate's cache (:mod:`sparring.admission.gate`)."""
    from sparring.admission.gate import remember

    env = layer_for(task.spec.environment).digest if rep.outcomes else ""
    record = admission_record(rep, repeats, env, judge_version)
    if task.spec.environment.image is None and rep.outcomes:  # judged on the host's own system
        host = current_host_environment()
        remember_snapshot(host)
        record["host"] = host.brief()
    remember(record)
    return store_admission(task, record)


def store_admission(task: Task, record: dict[str, Any]) -> Path:
    """Write admission.json next to task.toml atomically (not part of the digest: it is about the task)."""
    return write_task_record(task, ADMISSION_FILE, record)
