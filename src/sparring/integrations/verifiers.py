"""verifiers (0.4, the ``verifiers.v1`` stack): Sparring tasks as a verifiers environment.

:func:`load_environment` returns a ``vf.Env`` whose taskset is Sparring's tasks
and whose episode is a Sparring :class:`~sparring.env.Environment`: the agent's
replies are parsed for tool calls (``<tool_call>`` JSON, as the prompt shows),
run in the episode's sandbox, and their outputs are the next user turn; when
the agent submits or a budget ends the episode, the real judge's reward is
recorded on the trace as ``sparring_reward``. verifiers' own evaluation loop
(``run_eval``) drives it against any OpenAI-compatible endpoint.

The agent's chat program runs with this interpreter (:class:`SparringChatHarness`)
rather than verifiers' default, which bootstraps ``uv`` over the network.
"""

from __future__ import annotations

import hashlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import verifiers.v1 as vf
from verifiers.v1.harnesses.null.harness import NullHarness

from sparring.chat_format import TOOL_INSTRUCTIONS, render_tools
from sparring.env import SampledTurn
from sparring.integrations.tasks import TaskSet

PLUGIN_ID = "sparring_verifiers"
"""The id verifiers imports this module by (its plugins are top-level modules)."""

__all__ = ["SparringChatHarness", "SparringTaskset", "SparringVerifiersEnv", "load_environment"]


class SparringData(vf.TaskData):
    task_id: str
    task_path: str
    seed: int = 0


class SparringTask(vf.Task[SparringData]):
    pass


class SparringTasksetConfig(vf.TasksetConfig):
    tasks: str = ""
    """A task directory or a directory of tasks."""
    max_steps: int | None = None
    """Override the tasks' step budget."""


class SparringTaskset(vf.Taskset[SparringTask, SparringTasksetConfig]):
    """One verifiers task per Sparring task (the episode's prompt is built when it starts)."""

    def load(self) -> Iterator[SparringTask]:
        for t in TaskSet(self.config.tasks).tasks:
            data = SparringData(name=t.id, prompt=None, task_id=t.id, task_path=str(t.path))
            yield SparringTask(data, self.config.task)


class _LocalPython:
    """A runtime whose ``uv`` scripts run with this Python (which has their dependencies)."""

    def __init__(self, runtime: Any) -> None:
        self._runtime = runtime

    def __getattr__(self, name: str) -> Any:
        return getattr(self._runtime, name)

    async def prepare_uv_script(
        self, script: str | bytes, env: Any = None, *, activate: bool = True
    ) -> list[str]:
        data = script.encode() if isinstance(script, str) else script
        path = f".vf-script-{hashlib.sha256(data).hexdigest()[:16]}.py"
        await self._runtime.write(path, data)
        return [sys.executable, path]


class SparringChatHarness(NullHarness):
    """verifiers' plain chat program, run by this Python instead of a ``uv`` environment that
    verifiers would bootstrap from the network."""

    async def setup(self, runtime: Any) -> None:
        await super().setup(_LocalPython(runtime))

    async def launch(self, ctx: Any, trace: Any, runtime: Any, *args: Any, **kwargs: Any) -> Any:
        return await super().launch(ctx, trace, _LocalPython(runtime), *args, **kwargs)


class SparringEnvConfig(vf.EnvConfig):
    agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())
    """The one seat; its chat program runs as a local subprocess (no remote runtime, no tunnel)."""


def _first_turn(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> str:
    """The opening user turn: the system prompt, the tools and how to call them, then the task."""
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    user = "\n\n".join(m["content"] for m in messages if m["role"] == "user")
    return f"{system}\n\n# Tools\n{TOOL_INSTRUCTIONS}\n{render_tools(tools)}\n\n{user}"


class SparringVerifiersEnv(vf.Env[SparringEnvConfig]):
    """A Sparring episode per verifiers rollout: replies -> tool calls in the sandbox -> judge."""

    def _tasks(self, fallback: str) -> TaskSet:
        """One TaskSet (one sandbox backend, one judge) for all of this environment's episodes."""
        ts: TaskSet | None = getattr(self, "_taskset_cache", None)
        if ts is None:
            cfg = self.config.taskset
            path = cfg.tasks if isinstance(cfg, SparringTasksetConfig) and cfg.tasks else fallback
            max_steps = cfg.max_steps if isinstance(cfg, SparringTasksetConfig) else None
            ts = TaskSet(path, max_steps=max_steps)
            self._taskset_cache = ts
        return ts

    async def run(self, task: Any, agents: Any) -> None:
        data = task.data
        env = self._tasks(data.task_path).environment(data.task_id, data.seed)
        obs = await env.areset(data.seed)
        try:
            async with agents.agent.interaction(task) as interaction:
                segment = await interaction.turn(_first_turn(obs.messages, obs.tools))
                while not segment.terminated:
                    res = await env.astep(SampledTurn(text=segment.last_reply))
                    if res.done:
                        break
                    segment = await interaction.turn("\n\n".join(str(m["content"]) for m in res.messages))
                if env.judgement is None:
                    if not env.done:
                        env.end("truncated")
                    await env.ajudge()
            trace = interaction.trace
            trace.record_reward("sparring_reward", float(env.reward or 0.0))
        finally:
            await env.aclose()


def load_environment(tasks: str | Path, *, max_steps: int | None = None, **env_fields: Any) -> vf.Env:
    """The verifiers environment of the Sparring tasks under ``tasks`` (run it with verifiers'
    ``run_eval``, or serve it as any verifiers environment)."""
    sys.modules.setdefault(PLUGIN_ID, sys.modules[__name__])  # verifiers imports plugins by a top-level name
    taskset = SparringTasksetConfig(id=PLUGIN_ID, tasks=str(Path(tasks).resolve()), max_steps=max_steps)
    config = SparringEnvConfig(taskset=taskset, **env_fields)
    return SparringVerifiersEnv(config)


def episode_reward(episode: Any) -> float | None:
    """The judge's reward recorded on a finished verifiers episode (None if it has none)."""
    for trace in getattr(episode, "traces", None) or []:
        r = (getattr(trace, "rewards", None) or {}).get("sparring_reward")
        if r is not None:
            return float(r.score)
    return None
