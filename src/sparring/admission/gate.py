"""The admission gate of the loop: only admitted tasks reach rollouts, evaluation and training.

A verdict is about exact bytes judged by an exact judge, so it is looked up by the task's digest and
the admission judge's version: beside the task (``admission.json``, written by ``tasks check`` and
``tasks generate``) or in the verdict cache (``$SPARRING_ADMISSION_CACHE``, default
``~/.cache/sparring/admission``, one small file per digest and judge version), which makes the gate
cheap the second time, also for a copy of the task elsewhere. A changed byte, or a changed judge,
means no verdict: the task is checked again (:func:`admit`) or refused (:func:`refuse_unadmitted`).
So does, for a task without its own image, a verdict made on another host system (another OS
release, interpreter build or set of installed packages: :mod:`sparring.sandbox.hostenv`), so a host
upgrade re-checks what it may have moved instead of trusting it silently.

Who does what:

- ``tasks generate`` and ``tasks check`` record verdicts;
- ``rollout`` and ``eval`` refuse a task without an admitting verdict (one line naming the rule, or
  ``tasks check`` when it was never checked); ``--allow-unadmitted`` overrides;
- ``train`` and ``demo`` check what has no verdict yet, skip a generated family's rejects with a
  logged reason, and refuse a rejected task of ``tasks`` / ``heldout_tasks`` (the user's own);
  ``allow_unadmitted: true`` overrides.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring import atomicfile
from sparring.errors import TaskError
from sparring.judge.base import Judge
from sparring.sandbox.hostenv import current_host_environment
from sparring.tasks.loader import Task, load_admission

ALLOW_FLAG = "--allow-unadmitted"
ALLOW_ENV = "SPARRING_ALLOW_UNADMITTED"
"""Set to 1: every gate lets unadmitted tasks through, as the flag does (the test suite's fixtures of the
loop's mechanics are hand-made tasks; the gate has tests of its own)."""


def allowed_by_env() -> bool:
    return os.environ.get(ALLOW_ENV, "") not in ("", "0")


def admission_judge_version() -> str:
    """The version of the judge admission runs (``tasks check``'s): the one every verdict is keyed by."""
    from sparring.judge.pytest_judge import JudgeConfig
    from sparring.judge.version import judge_version

    return judge_version(JudgeConfig().model_dump(exclude={"dynamic_seed", "shuffle_seed"}))


def cache_dir() -> Path:
    return Path(
        os.environ.get("SPARRING_ADMISSION_CACHE") or Path.home() / ".cache" / "sparring" / "admission"
    )


def _cache_path(digest: str, judge_version: str) -> Path:
    jv = hashlib.sha256(judge_version.encode()).hexdigest()[:16]
    return cache_dir() / f"{digest.removeprefix('sha256:')}-{jv}.json"


def remember(record: dict[str, Any]) -> None:
    """Put an admission record (it names its digest and judge version) into the verdict cache; a cache
    that cannot be written costs only a later re-check, never the run."""
    digest, jv = record.get("digest"), record.get("judge_version")
    if not digest or not jv or _judge_fault(record):
        return
    dest = _cache_path(str(digest), str(jv))
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        atomicfile.write_text(dest, json.dumps(record, sort_keys=True), mode=0o600)
    except OSError:
        pass


def _judge_fault(record: dict[str, Any]) -> bool:
    """A record of a check the judge could not finish: no verdict on the task (it is checked again)."""
    from sparring.admission.check import JUDGE_FAULT

    return any(p.get("rule") == JUDGE_FAULT for p in record.get("problems") or [])


def host_moved(task: Task, record: dict[str, Any]) -> str:
    """Why a verdict on a host-path task no longer holds on this host (``""`` when it does, or when the
    task runs in its own image): it was made on another host system (:mod:`sparring.sandbox.hostenv`)."""
    if task.spec.environment.image is not None or not record.get("outcomes"):
        return ""
    host = record.get("host")
    then: dict[str, Any] = host if isinstance(host, dict) else {}
    now = current_host_environment()
    if then.get("id") == now.id:
        return ""
    if not then:
        return f"checked without recording its host system (now {now.summary()})"
    was = f"{then.get('os')}, python {then.get('python')}, {then.get('packages')} packages"
    return f"checked on another host system ({was}; now {now.summary()})"


def lookup(task: Task, judge_version: str) -> dict[str, Any] | None:
    """The stored verdict on these exact bytes by this judge version, on this host system for a
    host-path task: beside the task, else cached."""
    rec = load_admission(task)
    fresh = rec is not None and rec.get("judge_version") == judge_version and not _judge_fault(rec)
    if rec is not None and fresh and not host_moved(task, rec):
        return rec
    try:
        cached = json.loads(_cache_path(task.digest, judge_version).read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(cached, dict) and cached.get("digest") == task.digest
    ok = ok and cached.get("judge_version") == judge_version
    return cached if ok and not host_moved(task, cached) else None


@dataclass(frozen=True)
class Verdict:
    task: Task
    ok: bool | None
    """True: admitted; False: rejected; None: never checked (with this judge version)."""
    reason: str = ""
    """Why not admitted, one line (the first broken rule and its detail)."""

    def line(self) -> str:
        if self.ok is None:
            return f"task {self.task.id} was {self.reason}: run `sparring tasks check {self.task.path}`"
        return f"task {self.task.id} is not admitted ({self.reason})"


def verdict_of(task: Task, record: dict[str, Any] | None, judge_version: str | None = None) -> Verdict:
    if record is None:
        old = load_admission(task)  # same bytes, another judge or host system: say so, it is not "never"
        if old is not None and old.get("judge_version"):
            same_judge = old["judge_version"] == (judge_version or admission_judge_version())
            moved = host_moved(task, old) if same_judge else ""
            if moved:
                return Verdict(task, None, moved)
            return Verdict(task, None, f"checked by judge {old['judge_version']}, not by the current one")
        return Verdict(task, None, "never admitted")
    if record.get("ok"):
        return Verdict(task, True)
    problems = record.get("problems") or [{"rule": "?", "detail": "rejected"}]
    first = problems[0]
    more = f"; and {len(problems) - 1} more" if len(problems) > 1 else ""
    detail = " ".join(str(first.get("detail", "")).split())[:200]
    return Verdict(task, False, f"{first.get('rule')}: {detail}{more}")


def verdicts(tasks: list[Task], judge_version: str | None = None) -> list[Verdict]:
    jv = judge_version or admission_judge_version()
    return [verdict_of(t, lookup(t, jv), jv) for t in tasks]


def refuse_unadmitted(tasks: list[Task], flag: str = ALLOW_FLAG) -> None:
    """A TaskError (one line) naming the first task without an admitting verdict, and the override."""
    if allowed_by_env():
        return
    bad = [v for v in verdicts(tasks) if not v.ok]
    if bad:
        others = f" (and {len(bad) - 1} more of {len(tasks)} tasks)" if len(bad) > 1 else ""
        raise TaskError(f"{bad[0].line()}{others}; only admitted tasks are used ({flag} overrides)")


async def admit(
    tasks: list[Task],
    judge: Judge,
    *,
    repeats: int | None = None,
    concurrency: int = 3,
    log: Callable[[str], None] = lambda s: None,
) -> list[Verdict]:
    """Each task's verdict: stored ones as they are, the others checked now (as ``tasks check`` does)
    and recorded beside the task and in the cache."""
    from sparring.admission.check import REFERENCE_RUNS, check_tasks, record_result

    jv = admission_judge_version()
    known = {t.digest: lookup(t, jv) for t in tasks}
    todo = [t for t in tasks if known[t.digest] is None]
    if todo:
        n = repeats or REFERENCE_RUNS
        log(f"admission: checking {len(todo)} task(s) never checked with judge {jv} (cached by digest)")
        by_digest = {t.digest: t for t in todo}
        for rep in await check_tasks(todo, judge, repeats=n, concurrency=concurrency):
            record_result(by_digest[rep.digest], rep, n, jv)
    return verdicts(tasks, jv)
