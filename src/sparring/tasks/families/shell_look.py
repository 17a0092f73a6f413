"""The ``shell-look`` family: look before acting, a skill spread over turns.

Like ``shell-ops`` (the ticket names an operation on a text file, the result
goes to ``out.txt``), except that the ticket does not name the file. The
workspace holds exactly one file, called one of :data:`NAMES`; only a tool call
reveals which (``ls`` prints ``[exit 0]`` then the name, alone on its line).
A correct episode is three turns: ``ls``, the operation on the file it showed
(``sort words.txt > out.txt``), ``submit()``. An agent that skips the look and
guesses a name passes one time in ``len(NAMES)`` (a missing file leaves
``out.txt`` empty), so the pass rate of a policy is bounded by its habit of
looking first: ``p_look + (1 - p_look) / len(NAMES)`` if it acts right.

Kept small for a 2-layer model on CPU: four operations whose commands differ
in their first word, and names that differ in their first word too, so the
one token to copy from the tool's output is short and always in the same place.
Tasks are balanced by construction: any 12 consecutive indices cover every
(operation, name) pair once (4 and 3 are coprime), and the name is independent
of the operation, so the ticket says nothing about the file.

:class:`sparring.policy.look_demonstrator.LookDemonstrator` is the warm-start
teacher: it looks first, except that with probability ``guess`` (a habit that
does not depend on the ticket) it acts at once on a name drawn at random.
:func:`is_inspection` says which tool calls count as looking, for the per-episode
skill measure (:mod:`sparring.monitor.skill`).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.tasks.environment import pinned_requirements
from sparring.tasks.families.shell_ops import apply_op, hidden_test
from sparring.tasks.loader import Task, write_generated
from sparring.tasks.spec import Environment, JudgeSpec, Limits, Provenance, TaskSpec

FAMILY = "shell-look"
VERSION = "1"
GENERATOR = f"{FAMILY}/{VERSION}"
HIDDEN_TEST_ID = "test_out.py::test_out_matches"
NAMES = ("notes.txt", "words.txt", "items.txt")  # the file's possible names; a guess is right 1 time in 3
INSPECT = "ls"  # the demonstrator's look


@dataclass(frozen=True)
class LookOp:
    name: str
    phrase: str  # how the instruction names it
    template: str  # the reference command; {f} is the file's name

    def command(self, filename: str) -> str:
        return self.template.format(f=filename)


OPS: dict[str, LookOp] = {
    o.name: o
    for o in (
        LookOp("sort", "sorted alphabetically", "sort {f} > out.txt"),
        LookOp("reverse", "in reverse order (last line first)", "tac {f} > out.txt"),
        LookOp("upper", "converted to upper case", "tr a-z A-Z < {f} > out.txt"),
        LookOp("count", "replaced by their count (one number: how many lines)", "wc -l < {f} > out.txt"),
    )
}
_LETTERS = "abcdefghijklmnoprstuw"


def data_lines(rng: random.Random) -> list[str]:
    """5-7 distinct random words, not in sorted order, so every operation gives a different result."""
    while True:
        lines = sorted(  # sorted, not list(): a set's order depends on the process's string hash seed
            {
                "".join(rng.choice(_LETTERS) for _ in range(rng.randint(3, 6)))
                for _ in range(rng.randint(5, 7))
            }
        )
        rng.shuffle(lines)
        outs = {tuple(apply_op(o, lines)) for o in OPS}
        if len(outs) == len(OPS) and lines not in (sorted(lines), sorted(lines, reverse=True)):
            return lines


def _orders(seed: int) -> tuple[list[str], list[str]]:
    """The per-seed orders of operations and names; task ``index`` takes ops[i % 4], names[i % 3]."""
    rng = random.Random(zlib.crc32(f"{GENERATOR}:order:{seed}".encode()))
    ops, names = sorted(OPS), list(NAMES)
    rng.shuffle(ops)
    rng.shuffle(names)
    return ops, names


def shell_look_task(
    index: int, seed: int
) -> tuple[TaskSpec, dict[str, str | bytes], dict[str, str | bytes], dict[str, str | bytes]]:
    """(spec, workspace, hidden, solution) of task ``index`` of ``seed``."""
    rng = random.Random(zlib.crc32(f"{GENERATOR}:{seed}:{index}".encode()))
    ops, names = _orders(seed)
    op, filename = OPS[ops[index % len(ops)]], names[index % len(names)]
    lines = data_lines(rng)
    expected = apply_op(op.name, lines)
    spec = look_spec(
        task_id=f"shell-look-s{seed}-{index:04d}-{op.name}", family=FAMILY, generator=GENERATOR, seed=seed,
        index=index,
        # The ticket names the operation up front and never the file: only a look reveals it.
        instruction=f"Ticket {op.name.upper()}: write the lines of the one file here {op.phrase} to out.txt, then submit.",
        success=f"out.txt holds exactly the lines of the workspace's file {op.phrase}.",
        max_steps=5, difficulty=2, tags=[f"op:{op.name}", f"file:{filename}"],
    )  # fmt: skip
    return (spec, *look_files(filename, lines, expected, FAMILY))


def look_spec(
    *, task_id: str, family: str, generator: str, seed: int, index: int, instruction: str, success: str,
    max_steps: int, difficulty: int, tags: list[str],
) -> TaskSpec:  # fmt: skip
    """The spec of a look family's task: what differs is given, the rest (tools, limits, the judge of
    ``out.txt``, provenance, the pinned environment) is the same in shell-look and shell-look-deep."""
    return TaskSpec.model_validate(
        {
            "id": task_id,
            "family": family,
            "instruction": instruction,
            "success_criteria": success,
            "tools": ["bash", "submit"],
            "limits": Limits(
                max_steps=max_steps, wall_s=60.0, exec_timeout_s=10.0, memory_mb=256, pids=64, disk_mb=16
            ),
            "judge": JudgeSpec(hidden_tests=[HIDDEN_TEST_ID], weights={"all_pass": 1.0}, timeout_s=30.0),
            "difficulty": difficulty,
            "tags": [family, *tags],
            "provenance": Provenance(generator=generator, seed=seed, source=f"index {index}"),
            "environment": Environment(requirements=pinned_requirements()),
        }
    )


def look_files(
    path: str, lines: list[str], expected: list[str], family: str
) -> tuple[dict[str, str | bytes], dict[str, str | bytes], dict[str, str | bytes]]:
    """(workspace, hidden, solution) of a look family's task: the one file at ``path``, the hidden test
    of ``out.txt``, the reference ``out.txt``."""
    workspace: dict[str, str | bytes] = {path: "\n".join(lines) + "\n"}
    hidden: dict[str, str | bytes] = {"test_out.py": hidden_test(expected, family)}
    solution: dict[str, str | bytes] = {"out.txt": "\n".join(expected) + "\n"}
    return workspace, hidden, solution


def _tag(task: Task, prefix: str) -> str:
    for tag in task.spec.tags:
        if tag.startswith(prefix):
            return tag[len(prefix) :]
    raise KeyError(f"{task.id} is not a shell-look task (no {prefix} tag)")


def task_op(task: Task) -> LookOp:
    """The operation a shell-look task asks for (from its tags)."""
    return OPS[_tag(task, "op:")]


def task_file(task: Task) -> str:
    """The path of a shell-look task's file in its workspace (privileged: from its tags, as scripted
    policies may read); ``FOLDER/NAME`` in a ``shell-look-deep`` task."""
    return _tag(task, "file:")


def task_dir(task: Task) -> str | None:
    """The folder holding the file of a ``shell-look-deep`` task (None: the file is at the top)."""
    try:
        return _tag(task, "dir:")
    except KeyError:
        return None


def is_inspection(tool: str, arguments: dict[str, Any] | None) -> bool:
    """True for a tool call that looks without acting: ``list_dir``, or a ``bash`` command that is an ``ls``."""
    if tool == "list_dir":
        return True
    command = (arguments or {}).get("command") if tool == "bash" else None
    return isinstance(command, str) and command.split()[:1] == [INSPECT]


@dataclass(frozen=True)
class ShellLookGenerator:
    """Generates shell-look tasks; the same (n, seed) writes the same bytes."""

    name: str = FAMILY
    version: str = VERSION

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        return write_generated(shell_look_task, n, seed, out)


__all__ = [
    "FAMILY", "NAMES", "OPS", "ShellLookGenerator", "data_lines", "is_inspection", "look_files", "look_spec",
    "shell_look_task", "task_dir", "task_file", "task_op",
]  # fmt: skip
