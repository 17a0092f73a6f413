"""The shell-look families' demonstrator: looks before acting, except for a habit of guessing.

The warm-start teacher of ``sparring demo --family shell-look`` (and
``shell-look-deep``). Behaviour cloning of it gives a model with the three-turn
format (``ls``, act on the name it showed, ``submit()``; ``shell-look-deep``:
``ls``, ``ls FOLDER``, act on ``FOLDER/NAME``, ``submit()``) and the teacher's
habit of skipping the looks at rate ``guess``; the guess passes one time in
``len(NAMES)`` (deep: one in ``len(DIRS) * len(NAMES)``), so what RL can raise
is the share of episodes that look first and then copy the names from the
tool's output.
"""

from __future__ import annotations

import random
import zlib

from sparring.errors import ConfigError
from sparring.policy.base import Action, ActRequest
from sparring.policy.scripted import ReadsReference, tool_call_message
from sparring.tasks.families.shell_look import INSPECT, NAMES, task_dir, task_file, task_op
from sparring.tasks.families.shell_look_deep import DIRS
from sparring.tasks.loader import Task


class LookDemonstrator(ReadsReference):
    """A scripted shell-look agent: ``bash("ls")``, ``bash(op on the file)``, ``submit()``; on a
    ``shell-look-deep`` task ``bash("ls")``, ``bash("ls FOLDER")``, ``bash(op on FOLDER/NAME)``, ``submit()``.

    With probability ``guess`` (per task and sample, deterministically; it does
    not depend on the ticket) it skips the looks and runs the operation on a
    name drawn uniformly from :data:`NAMES` (deep: in a folder drawn from
    :data:`DIRS`), then submits. It reads the names from the task's privileged
    tags rather than parsing ``ls``, as scripted policies may; they are the
    ones ``ls`` shows.
    """

    version = 0

    def __init__(self, guess: float = 0.5, seed: int = 0) -> None:
        if not 0.0 <= guess <= 1.0:
            raise ConfigError(f"guess must be in [0, 1], got {guess}")
        self.guess = guess
        self.seed = seed
        self.name = f"shell-look-demonstrator(guess={guess:g})"

    def plan(self, task: Task, sample_index: int, seed: int) -> list[str]:
        """The bash commands of one episode, in order (``submit()`` follows them)."""
        rng = random.Random(zlib.crc32(f"look:{self.seed}:{seed}:{sample_index}:{task.id}".encode()))
        op, folder = task_op(task), task_dir(task)
        if rng.random() < self.guess:
            if folder is None:
                return [op.command(rng.choice(NAMES))]
            guessed = rng.choice(DIRS)
            return [op.command(f"{guessed}/{rng.choice(NAMES)}")]
        looks = [INSPECT] if folder is None else [INSPECT, f"{INSPECT} {folder}"]
        return [*looks, op.command(task_file(task))]

    async def act(self, request: ActRequest) -> Action:
        turn = sum(1 for m in request.messages if m.get("role") == "assistant")
        plan = self.plan(self.reference(request), request.sample_index, request.seed)
        if turn < len(plan):
            return Action(tool_call_message("bash", {"command": plan[turn]}, f"call_{turn}"))
        return Action(tool_call_message("submit", {}, f"call_{turn}"))

    async def close(self) -> None:
        return None
