"""Gymnasium: a Sparring task as a ``gymnasium.Env`` with text spaces, for loops that expect reset/step/close.

Observations are text: the JSON (ASCII) of the messages the step added (after
``reset``: the system and user prompt), so any text policy can read them; the
parsed messages and the tools (OpenAI schemas) are in ``info``. Actions are text
too: a model's raw reply, whose tool calls Sparring parses (``<tool_call>``
JSON, as the Sparring chat template writes them), or the JSON of an OpenAI
assistant message. The reward is the judge's, given when the episode ends
(``terminated``: the agent submitted; ``truncated``: a budget ended it), 0.0
before. ``reset(seed=s)`` picks the task by ``s`` among ``tasks`` (or
``options={"task_id": ...}``) and starts a fresh sandbox; ``close()`` frees it::

    env = SparringGymEnv("tasks/")
    obs, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step('<tool_call>{"name": "submit", "arguments": {}}</tool_call>')
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, SupportsFloat

import gymnasium
from gymnasium import spaces

from sparring.env import Environment, SampledTurn
from sparring.integrations.tasks import TaskSet

OBS_CHARSET = "".join(chr(c) for c in range(0x20, 0x7F))
"""Observations are ASCII JSON (``ensure_ascii``): printable ASCII only."""
ACTION_CHARSET = OBS_CHARSET + "\n\t"
MAX_OBS_CHARS = 1 << 20
MAX_ACTION_CHARS = 1 << 16


def _action(text: str) -> dict[str, Any] | SampledTurn:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            msg = json.loads(stripped)
        except json.JSONDecodeError:
            msg = None
        if (
            isinstance(msg, dict)
            and msg.get("role", "assistant") == "assistant"
            and ("tool_calls" in msg or "content" in msg)
        ):
            return msg
    return SampledTurn(text=text)


class SparringGymEnv(gymnasium.Env[str, str]):
    """One Sparring Environment at a time behind Gymnasium's API (see the module docstring)."""

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (gymnasium's own class attribute)

    def __init__(
        self, tasks: str | Path | TaskSet, task_id: str | None = None, **budget_overrides: Any
    ) -> None:
        """``tasks``: a task directory or a directory of tasks (or a TaskSet); ``task_id`` fixes the task
        (else ``reset``'s seed picks it); ``budget_overrides`` (``max_steps=``...) apply to every episode."""
        self.tasks = tasks if isinstance(tasks, TaskSet) else TaskSet(tasks, **budget_overrides)
        self.task_id = task_id
        self.observation_space = spaces.Text(max_length=MAX_OBS_CHARS, min_length=0, charset=OBS_CHARSET)
        self.action_space = spaces.Text(max_length=MAX_ACTION_CHARS, min_length=0, charset=ACTION_CHARSET)
        self.env: Environment | None = None

    @staticmethod
    def _text(messages: list[dict[str, Any]]) -> str:
        return json.dumps(messages, ensure_ascii=True)[:MAX_OBS_CHARS]

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        if seed is None:
            seed = int(self.np_random.integers(0, 2**31 - 1))
        task_id = (options or {}).get("task_id", self.task_id)
        if self.env is not None:
            self.env.close()
        self.env = self.tasks.environment(task_id, seed)
        obs = self.env.reset(seed)
        info = {"messages": obs.messages, "tools": obs.tools, **obs.info}
        return self._text(obs.messages), json.loads(json.dumps(info))

    def step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        if self.env is None:
            raise gymnasium.error.ResetNeeded("call reset() before step()")
        if not isinstance(action, str):
            raise gymnasium.error.InvalidAction(f"an action is text (str), got {type(action).__name__}")
        res = self.env.step(_action(action))
        info = json.loads(json.dumps({"messages": res.messages, **res.info}))
        if res.done:
            self.env.close()
        return self._text(res.messages), float(res.reward or 0.0), res.terminated, res.truncated, info

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
