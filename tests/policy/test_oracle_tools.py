"""The oracle uses only the tools a task offers: on shell-ops (``bash, submit``) it reads and
writes through the shell and solves the task, instead of calling tools that do not exist."""

from __future__ import annotations

import asyncio

import pytest

from sparring.env import Environment
from sparring.policy.base import ActRequest, PolicyTask
from sparring.policy.scripted import OraclePolicy
from sparring.tasks.families import generate


async def _oracle_episode(task):  # type: ignore[no-untyped-def]
    pol = OraclePolicy().for_task(task)
    async with Environment(task) as env:
        obs = await env.areset(seed=0)
        for turn in range(task.spec.limits.max_steps):
            req = ActRequest(
                messages=list(env.messages), tools=obs.tools, task=PolicyTask.of(task), step=turn
            )
            res = await env.astep((await pol.act(req)).message)
            if res.done:
                return res, env
    raise AssertionError("the oracle did not finish within the step budget")


@pytest.mark.parametrize("family", ["shell-ops", "code-repair"])
def test_oracle_calls_only_offered_tools_and_passes(family, tmp_path):
    (task,) = generate(family, 1, 0, tmp_path / "tasks")
    res, env = asyncio.run(_oracle_episode(task))
    used = {s.name for s in env.steps}
    assert used <= set(task.spec.tools), used
    assert all(s.error is None for s in env.steps), [s.error for s in env.steps]
    assert res.terminated and res.reward is not None and res.info["components"]["all_pass"] == 1.0
    if family == "shell-ops":
        assert used == {"bash", "submit"}
