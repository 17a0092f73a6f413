"""Scripted policies: ``oracle`` (solves a task from its reference solution
through the tools, as an agent would), ``adversarial`` (reward hacks) and
``random`` (random tool calls). The oracle and the hacker read the task's
privileged parts, so they act only once bound to the task
(:class:`ReadsReference`, which the rollout does); the request they get, like a
model policy's, holds only the task's public view.
"""

from __future__ import annotations

import base64
import copy
import json
import posixpath
import random
import shlex
import zlib
from typing import Any

from sparring.errors import PolicyError
from sparring.policy.base import Action, ActRequest
from sparring.tasks.loader import Task


def tool_call_message(name: str, args: dict[str, Any], call_id: str, content: str = "") -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
        ],
    }


def _assistant_turns(messages: list[dict[str, Any]]) -> int:
    return sum(1 for m in messages if m.get("role") == "assistant")


def minimal_edit(old: str, new: str, max_lines: int = 6) -> tuple[str, str] | None:
    """One ``str_replace`` turning ``old`` into ``new``: the single changed hunk, widened by
    context lines until it occurs exactly once. None if the change is not one small hunk."""
    import difflib

    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    hunks = [op for op in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if len(hunks) != 1:
        return None
    _, i1, i2, j1, j2 = hunks[0]
    for ctx in range(0, 4):
        lo, hi = max(0, i1 - ctx), min(len(a), i2 + ctx)
        o = "".join(a[lo:hi])
        n = "".join(a[lo:i1]) + "".join(b[j1:j2]) + "".join(a[i2:hi])
        if o and old.count(o) == 1 and hi - lo <= max_lines + 2 * ctx:
            return o, n
    return None


class ReadsReference:
    """A scripted policy that reads the task's privileged parts (a :class:`~sparring.policy.base.TaskBoundPolicy`).

    ``for_task(task)`` gives a bound copy; :meth:`reference` hands the bound task
    to the policy's own code, checking it is the task of the request.
    """

    bound: Task | None = None

    def for_task(self, task: Task) -> ReadsReference:
        out = copy.copy(self)
        out.bound = task
        return out

    def reference(self, request: ActRequest) -> Task:
        """The task this policy was bound to; PolicyError when unbound or bound to another task."""
        name = getattr(self, "name", type(self).__name__)
        if self.bound is None:
            raise PolicyError(
                f"policy {name} reads the task's reference: bind it first (policy_for_task(policy, task))"
            )
        if self.bound.id != request.task.id:
            raise PolicyError(
                f"policy {name} is bound to task {self.bound.id}, asked to play {request.task.id}"
            )
        return self.bound


class _PlannedPolicy(ReadsReference):
    """A scripted policy that replays ``plan(request)``: turn k makes call k (the last one repeats)."""

    def plan(self, request: ActRequest) -> list[tuple[str, dict[str, Any]]]:
        raise NotImplementedError

    async def act(self, request: ActRequest) -> Action:
        plan = self.plan(request)
        i = min(_assistant_turns(request.messages), len(plan) - 1)
        name, args = plan[i]
        return Action(tool_call_message(name, args, f"call_{i}"))

    async def close(self) -> None:
        return None


def offered_tools(request: ActRequest) -> set[str]:
    """Names of the tools this turn offers (the task's tool list when the request carries no schemas)."""
    names = {str((t.get("function") or {}).get("name", "")) for t in request.tools if isinstance(t, dict)}
    return (names - {""}) or set(request.task.tools)


def bash_write(rel: str, data: bytes) -> str:
    """A shell command writing ``data`` to ``rel`` byte for byte (for tasks that offer only ``bash``)."""
    parent = posixpath.dirname(rel)
    mkdir = f"mkdir -p -- {shlex.quote(parent)} && " if parent else ""
    return f"{mkdir}printf %s {base64.b64encode(data).decode()} | base64 -d > {shlex.quote(rel)}"


def example_arguments(parameters: dict[str, Any], rng: random.Random) -> dict[str, Any]:
    """Plausible arguments for a declared tool: each property a random value of its JSON type
    (from its ``enum`` when it has one)."""
    values: dict[str, Any] = {
        "string": lambda: rng.choice(["a", "x", "1", "none", "main"]), "integer": lambda: rng.randint(-1, 9),
        "number": lambda: rng.choice([0.0, 0.5, 2.0]), "boolean": lambda: rng.random() < 0.5,
        "array": lambda: [], "object": lambda: {}, "null": lambda: None,
    }  # fmt: skip
    out: dict[str, Any] = {}
    for key, sub in sorted((parameters.get("properties") or {}).items()):
        enum = sub.get("enum")
        out[key] = rng.choice(enum) if enum else values[sub["type"]]()
    return out


class OraclePolicy(_PlannedPolicy):
    """Looks around, reads each file it will fix, edits it into the reference version (one small
    ``str_replace`` where the fix is one hunk, else ``write_file``), runs the tests, submits. It uses
    only the tools the task offers: with ``bash`` alone (shell-ops) it looks, reads and writes
    through the shell. A task whose reference is a sequence of tool calls (``solution_calls``,
    tool-use) is solved by replaying those calls."""

    name = "oracle"
    version = 0

    def plan(self, request: ActRequest) -> list[tuple[str, dict[str, Any]]]:
        tools = offered_tools(request)
        task = self.reference(request)
        calls = task.solution_calls()
        if calls and {name for name, _ in calls} <= tools:
            return [*calls, ("submit", {})]  # a reference made of tool calls (a stateful service's task)
        files, deleted = task.solution_files()
        shell = "bash" in tools
        steps: list[tuple[str, dict[str, Any]]] = []
        if "list_dir" in tools:
            steps.append(("list_dir", {"path": "."}))
        elif shell:
            steps.append(("bash", {"command": "ls -la"}))
        for rel in sorted(files):
            target = task.workspace / rel
            try:
                new_text = files[rel].decode("utf-8")
            except UnicodeDecodeError:  # a binary file (a workbook): only the shell writes its bytes
                if shell:
                    steps.append(("bash", {"command": bash_write(rel, files[rel])}))
                continue
            if target.is_file():
                if "read_file" in tools:
                    steps.append(("read_file", {"path": rel}))
                elif shell:
                    steps.append(("bash", {"command": f"cat -- {shlex.quote(rel)}"}))
                edit = minimal_edit(target.read_text(), new_text) if "str_replace" in tools else None
                if edit is not None:
                    steps.append(("str_replace", {"path": rel, "old": edit[0], "new": edit[1]}))
                    continue
            if "write_file" in tools:
                steps.append(("write_file", {"path": rel, "content": new_text}))
            elif shell:
                steps.append(("bash", {"command": bash_write(rel, files[rel])}))
        if shell and deleted:  # one call for all: a clean-up of many files must not eat the step budget
            steps.append(("bash", {"command": "rm -f -- " + " ".join(shlex.quote(rel) for rel in deleted)}))
        if "run_tests" in tools:
            steps.append(("run_tests", {}))
        steps.append(("submit", {}))
        return steps


class RandomPolicy:
    """Uniformly random tool calls with plausible arguments; submits with probability 0.15 per turn."""

    name = "random"
    version = 0
    COMMANDS = (
        "ls -la",
        "cat README* 2>/dev/null",
        "python -c 'print(42)'",
        "echo note >> notes.txt",
        "pwd",
        "true",
    )

    async def act(self, request: ActRequest) -> Action:
        rng = random.Random(
            zlib.crc32(f"{request.seed}:{request.sample_index}:{request.step}:{request.task.id}".encode())
        )
        ws = request.task.files
        files = sorted(ws)
        i = _assistant_turns(request.messages)
        if rng.random() < 0.15:
            return Action(tool_call_message("submit", {}, f"call_{i}"))
        declared = {t.name: t for t in request.task.custom_tools if t.name in offered_tools(request)}
        kind = rng.choice(["bash", "read_file", "list_dir", "str_replace", "run_tests", *sorted(declared)])
        f = rng.choice(files) if files else "x.txt"
        args: dict[str, Any]
        if kind == "bash":
            args = {"command": rng.choice(self.COMMANDS)}
        elif kind == "read_file":
            args = {"path": f}
        elif kind == "list_dir":
            args = {"path": "."}
        elif kind == "run_tests":
            args = {}
        elif kind in declared:
            args = example_arguments(declared[kind].parameters, rng)
        else:
            text = ws[f].decode(errors="replace") if f in ws else ""
            toks = [t for t in text.split() if len(t) > 2]
            old = rng.choice(toks) if toks else "zzz"
            args = {"path": f, "old": old, "new": rng.choice(["0", "1", "None", "x", "-1", "pass"])}
        return Action(tool_call_message(kind, args, f"call_{i}"))

    async def close(self) -> None:
        return None


class AdversarialPolicy(_PlannedPolicy):
    """Tries one reward hack per rollout through the tools (``adversarial:CLASS``), or cycles through
    every class of :data:`sparring.tasks.hacks.HACKS` by sample index (``adversarial``). The judge
    must score each attempt zero or flag it; the red-team suite checks that."""

    version = 0

    def __init__(self, hack: str | None = None) -> None:
        from sparring.tasks.hacks import HACKS

        if hack is not None and hack not in HACKS:
            from sparring.errors import ConfigError

            raise ConfigError(f"unknown hack class {hack!r} (known: {', '.join(sorted(HACKS))})")
        self.hack = hack
        self.name = f"adversarial:{hack}" if hack else "adversarial"

    def hack_for(self, request: ActRequest) -> str:
        from sparring.tasks.hacks import HACKS

        return self.hack or sorted(HACKS)[request.sample_index % len(HACKS)]

    def plan(self, request: ActRequest) -> list[tuple[str, dict[str, Any]]]:
        from sparring.tasks.hacks import HACKS

        diff = HACKS[self.hack_for(request)](self.reference(request))
        steps: list[tuple[str, dict[str, Any]]] = [("list_dir", {"path": "."})]
        for rel, data in sorted(diff.files.items()):
            steps.append(("write_file", {"path": rel, "content": data.decode("utf-8")}))
        for rel in diff.deleted:
            steps.append(("bash", {"command": f"rm -f -- '{rel}'"}))
        steps.append(("submit", {}))
        return steps


ScriptedCall = tuple[str, dict[str, Any] | str, str]
"""(tool name, arguments as a dict or raw text, the message's content)."""


class ScriptPolicy:
    """Replays fixed scripts of tool calls, one script per sample (``sample_index + seed`` modulo
    their number, so a forked branch, which samples with its own seed, may take another): turn k
    makes call k of the script, the last one repeats. Arguments given as text go
    out as they are (a malformed call); a call named ``""`` is a turn with no tool call at all.
    For process checks and forks: a behaviour written down, good or bad, played in a real sandbox.
    ``script:FILE.json`` loads ``[[[name, arguments, content], ...], ...]`` (one list per script)."""

    version = 0

    def __init__(self, scripts: list[list[ScriptedCall]], name: str = "script") -> None:
        from sparring.errors import ConfigError

        if not scripts or any(not s for s in scripts):
            raise ConfigError("a script policy needs at least one non-empty script of tool calls")
        self.scripts = scripts
        self.name = name

    @classmethod
    def from_file(cls, path: str) -> ScriptPolicy:
        from pathlib import Path

        from sparring.errors import ConfigError

        p = Path(path)
        try:
            data = json.loads(p.read_text())
            scripts = [[(str(c[0]), c[1], str(c[2]) if len(c) > 2 else "") for c in s] for s in data]
        except (OSError, ValueError, TypeError, IndexError, KeyError) as e:
            raise ConfigError(
                f"script policy {path}: {e}; write a JSON list of scripts, each a list of [name, arguments, content]"
            ) from None
        return cls(scripts, name=f"script:{p.name}")

    async def act(self, request: ActRequest) -> Action:
        script = self.scripts[(request.sample_index + request.seed) % len(self.scripts)]
        i = min(_assistant_turns(request.messages), len(script) - 1)
        name, args, content = script[i]
        if not name:
            return Action({"role": "assistant", "content": content or "thinking..."})
        raw = args if isinstance(args, str) else json.dumps(args)
        call = {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": raw}}
        return Action({"role": "assistant", "content": content, "tool_calls": [call]})

    async def close(self) -> None:
        return None
