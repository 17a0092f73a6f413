"""Policies see the task's public view, never its reference (issue 36).

An :class:`ActRequest` carries a :class:`PolicyTask`; walking everything
reachable from it finds no path into the task's directory and none of the
reference solution's or hidden tests' bytes. The same walk over the task
itself finds them (the positive control: the walk can see a leak). Scripted
policies that read the reference get the task by being bound to it.
"""

from __future__ import annotations

import asyncio
import gc
import json
import types
from pathlib import Path
from typing import Any

import pytest

from sparring.errors import PolicyError
from sparring.policy.base import ActRequest, PolicyTask, policy_for_task
from sparring.policy.scripted import AdversarialPolicy, OraclePolicy, RandomPolicy
from sparring.rollout.episode import Episode
from sparring.tasks import taskfs
from sparring.tasks.families import generate
from sparring.tasks.loader import Task

_SKIP = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.MethodType)


def _reachable(root: object, limit: int = 200_000) -> list[object]:
    """Every object reachable from ``root`` through instances and containers (classes, modules
    and functions are not followed: they lead to the whole program, not to this object's data)."""
    seen: set[int] = set()
    out: list[object] = []
    todo = [root]
    while todo and len(out) < limit:
        o = todo.pop()
        if id(o) in seen or isinstance(o, _SKIP):
            continue
        seen.add(id(o))
        out.append(o)
        todo.extend(gc.get_referents(o))
    assert len(out) < limit, "object graph walk did not finish"
    return out


def _leaks(root: object, task: Task) -> list[str]:
    secrets = [*taskfs.files(task.solution).values(), *taskfs.files(task.hidden).values()]
    where = str(task.path)
    found = []
    for o in _reachable(root):
        if isinstance(o, Task | Path):
            found.append(f"{type(o).__name__} {o}")
        elif isinstance(o, str) and where in o:
            found.append(f"path text {o!r}")
        elif isinstance(o, bytes | str) and any(
            (o.encode() if isinstance(o, str) else o) == s for s in secrets
        ):
            found.append(f"reference bytes ({len(o)})")
    return found


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    (t,) = generate("code-repair", 1, 0, tmp_path_factory.mktemp("tasks"))
    assert taskfs.files(t.solution) and taskfs.files(t.hidden)
    return t


def test_a_request_reaches_nothing_of_the_reference(task: Task) -> None:
    view = PolicyTask.of(task)
    req = ActRequest(messages=[{"role": "user", "content": task.spec.instruction}], tools=[], task=view)
    assert _leaks(req, task) == []
    assert view.id == task.id and view.family == "code-repair" and "run_tests" in view.tools
    assert dict(view.files) == taskfs.files(task.workspace)  # the initial workspace, by value


def test_the_walk_finds_the_reference_when_it_is_there(task: Task) -> None:
    """Positive control: the same walk over a record holding the Task reports the leak."""
    found = _leaks({"task": task, "solution": task.solution_files()}, task)
    assert any(f.startswith("Task ") for f in found)
    assert any(f.startswith("reference bytes") for f in found)


def test_an_episode_sends_the_view_and_binds_only_scripted_policies(task: Task) -> None:
    oracle, rnd = OraclePolicy(), RandomPolicy()
    ep = Episode(task, oracle)
    assert isinstance(ep.view, PolicyTask) and _leaks(ep.view, task) == []
    assert ep.actor is not oracle and ep.actor.bound is task and oracle.bound is None  # type: ignore[attr-defined]
    assert Episode(task, rnd).actor is rnd  # a policy that reads no reference is used as it is
    assert policy_for_task(AdversarialPolicy("delete_tests"), task).bound is task  # type: ignore[attr-defined]


def test_the_oracle_reads_the_reference_only_when_bound(task: Task, tmp_path: Path) -> None:
    req = ActRequest(messages=[], tools=[], task=PolicyTask.of(task))
    with pytest.raises(PolicyError, match="bind it first"):
        asyncio.run(OraclePolicy().act(req))
    (other,) = generate("code-repair", 1, 1, tmp_path / "other")
    with pytest.raises(PolicyError, match="bound to task"):
        asyncio.run(OraclePolicy().for_task(other).act(req))
    first = asyncio.run(OraclePolicy().for_task(task).act(req)).message
    assert json.loads(first["tool_calls"][0]["function"]["arguments"]) == {"path": "."}  # it looks first


def test_random_policy_edits_from_the_view_alone(task: Task) -> None:
    view: Any = PolicyTask.of(task)
    msgs: list[dict[str, Any]] = []
    names = set()
    for step in range(40):
        act = asyncio.run(RandomPolicy().act(ActRequest(messages=msgs, tools=[], task=view, step=step)))
        for c in act.message.get("tool_calls") or []:
            names.add(c["function"]["name"])
            path = json.loads(c["function"]["arguments"]).get("path")
            assert path in (None, ".") or path in view.files
    assert "str_replace" in names and "read_file" in names
