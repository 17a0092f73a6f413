"""The ``shell-ops`` family: transform a text file with the right shell command.

Small enough for a tiny CPU model to learn from execution feedback, real
enough to need the sandbox and the judge. The workspace holds ``data.txt``
(7-9 random lower-case words, one repeated, never in sorted order); the
instruction names one of eight operations (sort, reverse, de-duplicate, upper
case, first / last three lines, count, reverse sort) and asks for the result
in ``out.txt``. The agent solves it with one ``bash`` call such as
``sort -u data.txt > out.txt`` and then ``submit()``. The hidden test compares
``out.txt`` with the expected lines computed at generation time, so copying
visible examples is impossible: every task's data differs, and every pair of
operations gives a different ``out.txt`` on it (checked when generating).

:class:`sparring.policy.demonstrator.NoisyDemonstrator` (a policy, so in policy/) is the
warm-start teacher used by ``sparring demo``:
a scripted agent that makes two kinds of *systematic* mistakes. For each
operation it has one confusable partner (``sort`` vs ``sort -u``, ``head`` vs
``tail``...) and uses the partner's command with probability ``epsilon``; and,
independently, with probability ``forget_output`` it prints the result instead
of writing ``out.txt`` (the command without its ``> out.txt``), the classic
"answered on stdout" slip. Behaviour cloning of it gives a model that has the
tool-call format but a partial pass rate, which is where RL with execution
feedback has something to improve.
"""

from __future__ import annotations

import json
import random
import zlib
from dataclasses import dataclass
from pathlib import Path

from sparring.tasks.environment import pinned_requirements
from sparring.tasks.loader import Task, write_generated
from sparring.tasks.spec import Environment, JudgeSpec, Limits, Provenance, TaskSpec

FAMILY = "shell-ops"
VERSION = "3"
GENERATOR = f"{FAMILY}/{VERSION}"
HIDDEN_TEST_ID = "test_out.py::test_out_matches"
COMMAND_FILE = "command.sh"  # hidden/: the reference command (judge-side only, never mounted for the agent)


@dataclass(frozen=True)
class Op:
    name: str
    phrase: str  # how the instruction names it
    command: str  # the reference command, run from /workspace
    partner: str  # the operation a confused agent mixes it up with
    difficulty: int


OPS: dict[str, Op] = {
    o.name: o
    for o in (
        Op("sort", "sorted alphabetically", "sort data.txt > out.txt", "unique", 1),
        Op(
            "unique",
            "sorted alphabetically with duplicate lines removed",
            "sort -u data.txt > out.txt",
            "sort",
            2,
        ),
        Op("reverse", "in reverse order (last line first)", "tac data.txt > out.txt", "rsort", 1),
        Op("rsort", "sorted in reverse alphabetical order", "sort -r data.txt > out.txt", "reverse", 2),
        Op("head", "keeping only the first three lines", "head -n 3 data.txt > out.txt", "tail", 1),
        Op("tail", "keeping only the last three lines", "tail -n 3 data.txt > out.txt", "head", 1),
        Op("upper", "converted to upper case", "tr a-z A-Z < data.txt > out.txt", "count", 1),
        Op(
            "count",
            "replaced by their count (one number: how many lines)",
            "wc -l < data.txt > out.txt",
            "upper",
            2,
        ),
    )
}

_LETTERS = "abcdefghijklmnoprstuw"


def apply_op(op: str, lines: list[str]) -> list[str]:
    """The lines ``out.txt`` must hold after ``op`` (what the reference command writes)."""
    if op == "sort":
        return sorted(lines)
    if op == "unique":
        return sorted(set(lines))
    if op == "reverse":
        return lines[::-1]
    if op == "rsort":
        return sorted(lines, reverse=True)
    if op == "head":
        return lines[:3]
    if op == "tail":
        return lines[-3:]
    if op == "upper":
        return [x.upper() for x in lines]
    if op == "count":
        return [str(len(lines))]
    raise KeyError(op)


def _data(rng: random.Random) -> list[str]:
    """Random words, one duplicated, such that all eight operations give different results."""
    while True:
        words = [
            "".join(rng.choice(_LETTERS) for _ in range(rng.randint(3, 6))) for _ in range(rng.randint(6, 8))
        ]
        if len(set(words)) != len(words):
            continue
        lines = [*words, rng.choice(words)]
        rng.shuffle(lines)
        outs = {tuple(apply_op(o, lines)) for o in OPS}
        if len(outs) == len(OPS) and lines != sorted(lines) and lines != sorted(lines, reverse=True):
            return lines


def op_order(seed: int) -> list[str]:
    """The operations in a per-seed order; task ``index`` asks for ``op_order(seed)[index % 8]``.

    Balanced by construction: any 8 consecutive tasks cover every operation once, so a small
    training or held-out set never misses an operation (with random draws, 32 tasks often held a
    single task of some operation, and that operation could not be learnt or measured).
    """
    order = sorted(OPS)
    random.Random(zlib.crc32(f"{GENERATOR}:order:{seed}".encode())).shuffle(order)
    return order


def hidden_test(expected: list[str], family: str = "shell-ops") -> str:
    """The hidden test of a task whose answer is ``out.txt`` holding exactly ``expected`` (shell-ops, shell-look)."""
    return (
        f'"""Hidden test of a {family} task: out.txt holds exactly the expected lines."""\n'
        "from pathlib import Path\n\n"
        f"EXPECTED = {json.dumps(expected)}\n\n\n"
        "def test_out_matches():\n"
        '    out = Path("/workspace/out.txt")\n'
        '    assert out.is_file(), "out.txt was not written"\n'
        "    got = [line.strip() for line in out.read_text().strip().splitlines()]\n"
        "    assert got == EXPECTED\n"
    )


def shell_ops_task(
    index: int, seed: int
) -> tuple[TaskSpec, dict[str, str | bytes], dict[str, str | bytes], dict[str, str | bytes]]:
    """(spec, workspace, hidden, solution) of task ``index`` of ``seed``."""
    rng = random.Random(zlib.crc32(f"{GENERATOR}:{seed}:{index}".encode()))
    op = OPS[op_order(seed)[index % len(OPS)]]
    lines = _data(rng)
    expected = apply_op(op.name, lines)
    spec = TaskSpec.model_validate(
        {
            "id": f"shell-ops-s{seed}-{index:04d}-{op.name}",
            "family": FAMILY,
            # The ticket names the operation up front (a fixed position a tiny model can attend to).
            "instruction": f"Ticket {op.name.upper()}: write the lines of data.txt {op.phrase} to out.txt, then submit.",
            "success_criteria": f"out.txt holds exactly the lines of data.txt {op.phrase}, one per line.",
            "tools": ["bash", "submit"],
            "limits": Limits(
                max_steps=4, wall_s=60.0, exec_timeout_s=10.0, memory_mb=256, pids=64, disk_mb=16
            ),
            "judge": JudgeSpec(hidden_tests=[HIDDEN_TEST_ID], weights={"all_pass": 1.0}, timeout_s=30.0),
            "difficulty": op.difficulty,
            "tags": [FAMILY, f"op:{op.name}"],
            "provenance": Provenance(generator=GENERATOR, seed=seed, source=f"index {index}"),
            "environment": Environment(requirements=pinned_requirements()),
        }
    )
    workspace: dict[str, str | bytes] = {"data.txt": "\n".join(lines) + "\n"}
    hidden: dict[str, str | bytes] = {"test_out.py": hidden_test(expected), COMMAND_FILE: op.command + "\n"}
    solution: dict[str, str | bytes] = {"out.txt": "\n".join(expected) + "\n"}
    return spec, workspace, hidden, solution


def task_op(task: Task) -> Op:
    """The operation a shell-ops task asks for (from its tags)."""
    for tag in task.spec.tags:
        if tag.startswith("op:") and tag[3:] in OPS:
            return OPS[tag[3:]]
    raise KeyError(f"{task.id} is not a shell-ops task (no op: tag)")


@dataclass(frozen=True)
class ShellOpsGenerator:
    """Generates shell-ops tasks; the same (n, seed) writes the same bytes."""

    name: str = FAMILY
    version: str = VERSION

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        return write_generated(shell_ops_task, n, seed, out)


__all__ = ["FAMILY", "OPS", "ShellOpsGenerator", "apply_op", "op_order", "shell_ops_task", "task_op"]
