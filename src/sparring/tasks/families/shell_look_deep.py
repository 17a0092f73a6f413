"""The ``shell-look-deep`` family: two looks before acting (issue 37's harder multi-turn variant).

``shell-look`` with the file one folder down: the workspace holds exactly one
folder, called one of :data:`DIRS`, holding exactly one file, called one of
:data:`~sparring.tasks.families.shell_look.NAMES`. ``ls`` shows the folder,
``ls FOLDER`` the file, and the act needs both names
(``sort inbox/words.txt > out.txt``). A correct episode is four turns: ``ls``,
``ls inbox``, the operation, ``submit()``. A guess of both names passes one
time in nine, a look at the folder followed by a guess of the file one time in
three: the pass rate is bounded by the habit of looking twice.

Tasks are balanced by construction: any 36 consecutive indices cover every
(operation, folder, file) triple once (task ``i`` takes operation ``i % 4``,
folder ``i % 3`` and file ``(i // 3) % 3``), so the ticket says nothing about
the folder or the file. The operations, the judge and the hidden test are
shell-look's; :func:`is_inspection` is too (any ``ls``).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from pathlib import Path

from sparring.tasks.families.shell_look import NAMES, OPS, data_lines, is_inspection, look_files, look_spec
from sparring.tasks.families.shell_ops import apply_op
from sparring.tasks.loader import Task, write_generated
from sparring.tasks.spec import TaskSpec

FAMILY = "shell-look-deep"
VERSION = "1"
GENERATOR = f"{FAMILY}/{VERSION}"
DIRS = ("inbox", "spool", "queue")  # the folder's possible names: first words that differ, like NAMES'
CYCLE = len(OPS) * len(DIRS) * len(NAMES)  # 36: consecutive indices covering every triple once


def _orders(seed: int) -> tuple[list[str], list[str], list[str]]:
    """The per-seed orders of operations, folders and file names."""
    rng = random.Random(zlib.crc32(f"{GENERATOR}:order:{seed}".encode()))
    ops, dirs, names = sorted(OPS), list(DIRS), list(NAMES)
    rng.shuffle(ops)
    rng.shuffle(dirs)
    rng.shuffle(names)
    return ops, dirs, names


def shell_look_deep_task(
    index: int, seed: int
) -> tuple[TaskSpec, dict[str, str | bytes], dict[str, str | bytes], dict[str, str | bytes]]:
    """(spec, workspace, hidden, solution) of task ``index`` of ``seed``."""
    rng = random.Random(zlib.crc32(f"{GENERATOR}:{seed}:{index}".encode()))
    ops, dirs, names = _orders(seed)
    op = OPS[ops[index % len(ops)]]
    folder, filename = dirs[index % len(dirs)], names[(index // len(dirs)) % len(names)]
    lines = data_lines(rng)
    expected = apply_op(op.name, lines)
    path = f"{folder}/{filename}"
    spec = look_spec(
        task_id=f"{FAMILY}-s{seed}-{index:04d}-{op.name}", family=FAMILY, generator=GENERATOR, seed=seed,
        index=index,
        # The ticket names the operation and never the folder or the file: only two looks reveal them.
        instruction=f"Ticket {op.name.upper()}: write the lines of the one file in the one folder here "
        f"{op.phrase} to out.txt, then submit.",
        success=f"out.txt holds exactly the lines of the file in the workspace's folder {op.phrase}.",
        max_steps=6, difficulty=3, tags=[f"op:{op.name}", f"file:{path}", f"dir:{folder}"],
    )  # fmt: skip
    return (spec, *look_files(path, lines, expected, FAMILY))


@dataclass(frozen=True)
class ShellLookDeepGenerator:
    """Generates shell-look-deep tasks; the same (n, seed) writes the same bytes."""

    name: str = FAMILY
    version: str = VERSION

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        return write_generated(shell_look_deep_task, n, seed, out)


__all__ = ["CYCLE", "DIRS", "FAMILY", "ShellLookDeepGenerator", "is_inspection", "shell_look_deep_task"]
