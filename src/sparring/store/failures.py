"""The failure-case library: stored failures clustered by signature, and promoted into new work.

A trajectory is a *failure* when it did not pass: any status but ``ok``, an
``ok`` whose hidden tests did not all pass, or any judge flag. Its
*signature* is (status, error type, failing hidden tests, flags), where the
error type is the error message with what varies between occurrences (ids,
numbers, paths, URLs, quoted values) masked, so "sandbox 3f2a... broken at
step 4" and "sandbox 91bc... broken at step 7" are one cluster.

A cluster is promoted into:

* ``tasks``: for each (task, trajectory) in it, a new task whose initial
  workspace is the failed attempt's final workspace (the original with the
  agent's diff applied); hidden tests and reference solution are the
  original's, so the task is "repair what this policy left behind". Only for
  judged failures (the diff is the policy's own work).
* ``regression``: a JSONL file of cases (trajectory id, task id and digest,
  the final diff, the stored status/reward/failing tests, judge version) that a
  judge or environment change can be re-checked against.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from sparring import atomicfile
from sparring.errors import ConfigError, StoreError
from sparring.sandbox.base import WorkspaceDiff
from sparring.store.base import TrajectoryStore, TrajQuery
from sparring.tasks import taskfs
from sparring.tasks.loader import Task, write_task
from sparring.trajectory import ERROR_STATUSES, Trajectory

_MASKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"https?://\S+"), "<url>"),
    (re.compile(r"(?<![\w.])/(?:[\w.@+-]+/)*[\w.@+-]+"), "<path>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<str>"),
    (re.compile(r"\b[0-9a-f]{8,}\b"), "<id>"),
    (re.compile(r"\b\d+(?:\.\d+)?(?:ms|s)?\b"), "<n>"),
)
EXAMPLES = 5


def is_failure(t: Trajectory) -> bool:
    return t.status != "ok" or not t.passed or bool(t.outcome_flags)  # process flags alone are no failure


def error_type(error: str | None) -> str:
    """The error with what varies between occurrences masked (first line, at most 160 chars)."""
    if not error:
        return ""
    text = error.strip().splitlines()[0]
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return text[:160]


def signature(t: Trajectory) -> tuple[str, str, tuple[str, ...], tuple[str, ...]]:
    return (t.status, error_type(t.error), tuple(sorted(t.failing_tests)), tuple(sorted(t.outcome_flags)))


def cluster_id(sig: tuple[str, str, tuple[str, ...], tuple[str, ...]]) -> str:
    return hashlib.sha256(json.dumps(sig).encode()).hexdigest()[:12]


@dataclass
class Cluster:
    id: str
    status: str
    error_type: str
    failing_tests: list[str]
    flags: list[str]
    count: int = 0
    tasks: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    newest: float = 0.0

    @property
    def promote_as(self) -> list[str]:
        return promote_as(self.status, self.flags)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id, "status": self.status, "error_type": self.error_type,
            "failing_tests": self.failing_tests, "flags": self.flags, "count": self.count,
            "tasks": dict(self.tasks.most_common()), "examples": self.examples,
            "promote_as": self.promote_as,
        }  # fmt: skip


def promote_as(status: str, flags: Iterable[str]) -> list[str]:
    """What a cluster of this status and these flags can be promoted as (`failures promote --as`).

    Always a regression case; a new task only from the policy's own, unflagged work: an infra or judge
    error's workspace is not the policy's, and a flagged workspace made a task's initial state would
    hide what the judge flagged from every later rollout's static checks (see promote_tasks)."""
    if status in ERROR_STATUSES or any(True for _ in flags):
        return ["regression"]
    return ["tasks", "regression"]


def cluster(trajs: Iterable[Trajectory]) -> list[Cluster]:
    """Failures grouped by signature, biggest cluster first (examples newest first)."""
    out: dict[str, Cluster] = {}
    for t in trajs:
        if not is_failure(t):
            continue
        sig = signature(t)
        cid = cluster_id(sig)
        c = out.get(cid)
        if c is None:
            c = out[cid] = Cluster(cid, sig[0], sig[1], list(sig[2]), list(sig[3]))
        c.count += 1
        c.tasks[t.task_id] += 1
        c.examples.append(t.id)
        c.newest = max(c.newest, t.created_at)
    for c in out.values():
        c.examples = c.examples[:EXAMPLES]  # iter_search yields newest first
    return sorted(out.values(), key=lambda c: (-c.count, -c.newest, c.id))


def failures(store: TrajectoryStore, query: TrajQuery) -> list[Cluster]:
    return cluster(store.iter_search(query.model_copy(update={"limit": None, "offset": 0})))


def members(store: TrajectoryStore, query: TrajQuery, cid: str) -> list[Trajectory]:
    """The trajectories of cluster ``cid`` (newest first); StoreError if there is no such cluster."""
    found = [t for t in store.iter_search(query.model_copy(update={"limit": None, "offset": 0}))
             if is_failure(t) and cluster_id(signature(t)) == cid]  # fmt: skip
    if not found:
        raise StoreError(f"no failure cluster {cid!r} in this store (see `sparring failures list`)")
    return found


def _apply(task: Task, diff: WorkspaceDiff) -> dict[str, str | bytes]:
    files: dict[str, str | bytes] = dict(taskfs.files(task.workspace))  # no link is read through
    for rel in diff.deleted:
        files.pop(rel, None)
        prefix = rel.rstrip("/") + "/"
        for k in [k for k in files if k.startswith(prefix)]:
            files.pop(k)
    files.update(diff.files)
    return files


def _read_dir(d: Path) -> dict[str, str | bytes]:
    return dict(taskfs.files(d))  # a task's own regular files: no link is read through


def promote_tasks(trajs: list[Trajectory], tasks: dict[tuple[str, str], Task], out: Path, cid: str,
                  limit: int) -> list[dict[str, Any]]:  # fmt: skip
    """New tasks starting from each failed attempt's final workspace (one per task, newest first)."""
    if trajs and trajs[0].status in ERROR_STATUSES:
        raise ConfigError(f"cluster {cid} holds {trajs[0].status} samples: their workspace is not the policy's "
                          "work; promote it --as regression instead")  # fmt: skip
    flagged = sorted({f for t in trajs for f in t.outcome_flags})
    if flagged:
        # The judge's static checks read only what an agent *added* to the initial workspace. A flagged
        # workspace promoted into a task makes the flagged code the task's own: invisible to those checks
        # in every later rollout (a hack switched on by a one-byte file would then score unflagged).
        raise ConfigError(f"cluster {cid} is flagged ({', '.join(flagged)}): its workspaces hold what the judge "
                          "flagged and must not become a task's initial state; promote it --as regression instead")  # fmt: skip
    made: list[dict[str, Any]] = []
    seen: set[str] = set()
    for t in trajs:
        if len(made) >= limit:
            break
        task = tasks.get((t.task_id, t.task_digest))
        if task is None or t.task_id in seen:
            continue
        seen.add(t.task_id)
        new_id = f"{task.id}-fail-{t.id[:8]}"[:200]
        failing = ", ".join(t.failing_tests[:5]) or "the hidden tests"
        spec = task.spec.model_copy(
            deep=True,
            update={
                "id": new_id,
                "version": 1,
                "instruction": f"A previous attempt left this workspace failing ({failing}). "
                f"Starting from it: {task.spec.instruction}",
                "tags": sorted({*task.spec.tags, "promoted-failure", f"cluster-{cid}"}),
                "provenance": task.spec.provenance.model_copy(
                    update={
                        "source": f"failure cluster {cid}, trajectory {t.id} of task {task.id}@{task.digest[:19]}"
                    }
                ),
            },
        )
        spec = type(spec).model_validate(spec.model_dump())  # re-validated: the new id must be a valid id
        sol_files, deleted = task.solution_files()
        new = write_task(out / new_id, spec, workspace=_apply(task, WorkspaceDiff.from_json(t.diff)),
                         hidden=_read_dir(task.hidden), solution=dict(sol_files), deleted=deleted)  # fmt: skip
        made.append({"id": new.id, "path": str(new.path), "digest": new.digest, "from_trajectory": t.id})
    if not made:
        raise ConfigError(f"none of cluster {cid}'s tasks are under --tasks (ids and digests must match)")
    return made


def promote_regression(trajs: list[Trajectory], out: Path, cid: str, limit: int) -> dict[str, Any]:
    """A JSONL file of regression cases, written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"regression-{cid}.jsonl"
    with atomicfile.replacing(path) as tmp, open(tmp, "w") as f:
        for t in trajs[:limit]:
            case = {"cluster": cid, "id": t.id, "task_id": t.task_id, "task_digest": t.task_digest,
                    "status": t.status, "reward": t.reward, "failing_tests": t.failing_tests,
                    "flags": t.flags, "error_type": error_type(t.error), "judge_version": t.judge_version,
                    "diff": t.diff}  # fmt: skip
            f.write(json.dumps(case, ensure_ascii=True) + "\n")
    return {"path": str(path), "cases": min(limit, len(trajs))}


PromoteKind = Literal["tasks", "regression"]
