"""The shell-ops family's demonstrator: a scripted agent with systematic mistakes, the demo's warm-start teacher.

It is a policy (it acts on requests), so it lives in policy/; the family
(:mod:`sparring.tasks.families.shell_ops`) only generates tasks and names each
task's operation and its confusable partner, which this policy reads.
"""

from __future__ import annotations

import random
import zlib

from sparring.errors import ConfigError
from sparring.policy.base import Action, ActRequest
from sparring.policy.scripted import ReadsReference, tool_call_message
from sparring.tasks.families.shell_ops import OPS, task_op
from sparring.tasks.loader import Task


class NoisyDemonstrator(ReadsReference):
    """A scripted shell-ops agent with systematic mistakes: ``bash(command)`` then ``submit()``.

    With probability ``epsilon`` it runs the command of the operation's
    confusable partner instead of the right one; independently, with
    probability ``forget_output`` it drops the ``> out.txt`` redirect, so the
    result goes to stdout and ``out.txt`` is never written. Both are decided per
    task and sample, deterministically. It reads the task's privileged tags, as
    scripted policies may.
    """

    version = 0

    def __init__(self, epsilon: float = 0.5, seed: int = 0, forget_output: float = 0.0) -> None:
        for name, value in (("epsilon", epsilon), ("forget_output", forget_output)):
            if not 0.0 <= value <= 1.0:
                raise ConfigError(f"{name} must be in [0, 1], got {value}")
        self.epsilon = epsilon
        self.forget_output = forget_output
        self.seed = seed
        self.name = f"shell-ops-demonstrator(eps={epsilon:g}, forget_output={forget_output:g})"

    def command(self, task: Task, sample_index: int, seed: int) -> str:
        op = task_op(task)
        rng = random.Random(zlib.crc32(f"{self.seed}:{seed}:{sample_index}:{task.id}".encode()))
        cmd = OPS[op.partner].command if rng.random() < self.epsilon else op.command
        if rng.random() < self.forget_output:
            cmd = cmd.rsplit(" > ", 1)[0]  # every reference command ends in "> out.txt"
        return cmd

    async def act(self, request: ActRequest) -> Action:
        turn = sum(1 for m in request.messages if m.get("role") == "assistant")
        if turn == 0:
            cmd = self.command(self.reference(request), request.sample_index, request.seed)
            return Action(tool_call_message("bash", {"command": cmd}, f"call_{turn}"))
        return Action(tool_call_message("submit", {}, f"call_{turn}"))

    async def close(self) -> None:
        return None
