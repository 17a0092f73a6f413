"""TRL: Sparring tasks, sandboxes and judge inside ``trl.GRPOTrainer``, in its three modes.

- **Reward function** (single-turn): :func:`tasks_to_dataset` gives the prompts
  (``mode="single_turn"``: the task and the current content of the files it
  changes), TRL samples one completion each, and :func:`judge_reward` writes
  the completion's files into the task's workspace and runs the real judge on
  them in a sandbox. The files a task changes come from the task itself (its
  reference solution's paths), never from a hard-coded name.
- **rollout_func** (multi-turn): :func:`make_rollout_func` plays whole episodes
  in Sparring sandboxes with TRL's live model (no second copy), one group of
  ``num_generations`` episodes per prompt as TRL lays them out, and returns
  token-in-token-out sequences: the ids the model sampled (``env_mask`` 1,
  with their logprobs) and the ids the environment appended between turns
  (``env_mask`` 0), cut at TRL's ``max_completion_length``; the judge's reward
  is the ``sparring_reward`` field, which :func:`rollout_reward` hands to TRL.
- **environment_factory**: :func:`environment_factory` makes a class whose typed,
  documented methods are exactly the tools the Environment offers (built-in and
  the tasks' own ``[[custom_tools]]``, generated from their schemas; TRL reads
  their signatures and docstrings back into the same schemas); ``reset`` starts
  a sandbox for the row's task and ``get_reward`` is the judge's verdict on what
  the episode left. Tasks with different tool sets get one class each, routed by
  the dataset's ``environment`` column (:mod:`sparring.integrations.trl_environment`).
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sparring.env import Environment, SampledTurn
from sparring.env.judging import judge_diff
from sparring.env.prompts import initial_messages
from sparring.integrations.tasks import TaskSet
from sparring.integrations.trl_environment import SparringToolEnv, environment_factory, tool_set_name
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks import taskfs
from sparring.tasks.loader import Task
from sparring.trajectory import TokenTrace

SINGLE_TURN_SYSTEM = (
    "You are a careful software engineer. Answer with the complete new content of every file you change, "
    "each in one fenced code block whose first line is `# file: PATH`."
)
_FENCE_RE = re.compile(r"```[^\n]*\n(.*?)(?:```|$)", re.DOTALL)
_FILE_LINE_RE = re.compile(r"^\s*#\s*file:\s*(\S+)\s*\n", re.IGNORECASE)


def _tasks(tasks: str | Path | TaskSet) -> TaskSet:
    return tasks if isinstance(tasks, TaskSet) else TaskSet(tasks)


def target_files(task: Task) -> list[str]:
    """The workspace files a single-turn answer rewrites: those the task's reference solution writes."""
    files, _ = task.solution_files()
    if not files:
        from sparring.errors import TaskError

        raise TaskError(
            f"task {task.id} has no solution/ files: single-turn mode needs them to know its targets"
        )
    return sorted(files)


def single_turn_prompt(task: Task) -> list[dict[str, Any]]:
    """The task's instruction and the current content of its target files, as chat messages."""
    parts = [f"{task.spec.instruction}\n\nSuccess criteria: {task.spec.success_criteria}\n"]
    for rel in target_files(task):
        data = taskfs.read_file(task.workspace, rel, follow_links=True)  # never out of the task
        current = data.decode(errors="replace") if data is not None else ""
        parts.append(f"Current `{rel}`:\n```\n# file: {rel}\n{current}```")
    return [{"role": "system", "content": SINGLE_TURN_SYSTEM}, {"role": "user", "content": "\n".join(parts)}]


def tasks_to_dataset(tasks: str | Path | TaskSet, *, mode: str = "multi_turn", repeat: int = 1) -> Any:
    """A ``datasets.Dataset`` with ``prompt`` (chat messages) and the task reference (``task_id``,
    ``task_path``, ``seed``), ``repeat`` rows per task. ``mode="multi_turn"``: the Environment's own
    first messages (for ``rollout_func`` and ``environment_factory``) and ``environment``, the task's
    tool set (how TRL routes a row when :func:`environment_factory` gives one class per tool set);
    ``"single_turn"``: the prompt :func:`judge_reward` expects (the task and its target files' content)."""
    from datasets import Dataset

    if mode not in ("multi_turn", "single_turn"):
        raise ValueError(f"mode must be 'multi_turn' or 'single_turn', got {mode!r}")
    ts = _tasks(tasks)
    rows = []
    for r in range(repeat):
        for t in ts.tasks:
            row: dict[str, Any] = {"task_id": t.id, "task_path": str(t.path), "seed": r}
            if mode == "multi_turn":
                row |= {"prompt": initial_messages(t), "environment": tool_set_name(t)}
            else:
                row["prompt"] = single_turn_prompt(t)
            rows.append(row)
    return Dataset.from_list(rows)


# -- single turn: a reward function --------------------------------------------------------------


def _text(completion: Any) -> str:
    """A TRL completion (text, or a list of messages) as plain text."""
    if isinstance(completion, str):
        return completion
    out = []
    for m in completion or []:
        if isinstance(m, dict):
            out.append(str(m.get("content") or ""))
            for c in m.get("tool_calls") or []:
                fn = c.get("function", c) if isinstance(c, dict) else {}
                out.append(json.dumps({"name": fn.get("name"), "arguments": fn.get("arguments")}))
    return "\n".join(out)


def _json_obj(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return None


def completion_files(completion: Any, targets: Sequence[str]) -> dict[str, bytes]:
    """The files a single-turn completion writes: its ``write_file`` tool calls if it makes any, else
    fenced blocks naming their file (``# file: PATH``);
    with one target file, its first unnamed block (or the whole text) too. Files outside ``targets``
    are kept: the judge decides what writing them is worth."""
    files: dict[str, bytes] = {}
    for m in completion if isinstance(completion, list) else []:  # write_file tool calls, as parsed by TRL
        for c in (m.get("tool_calls") or []) if isinstance(m, dict) else []:
            fn = c.get("function", c) if isinstance(c, dict) else {}
            args = fn.get("arguments")
            args = _json_obj(args) if isinstance(args, str) else args
            if (
                fn.get("name") == "write_file"
                and isinstance(args, dict)
                and isinstance(args.get("path"), str)
            ):
                files[args["path"]] = str(args.get("content") or "").encode()
    if files:
        return files
    text = _text(completion)
    from sparring.chat_format import parse_tool_calls

    for call in parse_tool_calls(text).tool_calls:  # the same calls written in the text
        if (
            call.name == "write_file"
            and isinstance(call.arguments, dict)
            and isinstance(call.arguments.get("path"), str)
        ):
            files[call.arguments["path"]] = str(call.arguments.get("content") or "").encode()
    if files:
        return files
    unnamed: list[str] = []
    for block in _FENCE_RE.findall(text):
        m = _FILE_LINE_RE.match(block)
        if m:
            files[m.group(1)] = block[m.end() :].encode()
        else:
            unnamed.append(block)
    if not files and len(targets) == 1:
        files[targets[0]] = (unnamed[0] if unnamed else text).encode()
    return files


def judge_reward(tasks: str | Path | TaskSet | None = None, *, concurrency: int = 4) -> Callable[..., Any]:
    """TRL reward function (async) for single-turn completions: each completion's files are written
    over its task's workspace and judged in a sandbox by the real judge; the reward is the judge's.
    Reads the dataset's ``task_path`` (or ``task_id`` with ``tasks``) column."""
    state: dict[str, Any] = {}
    loaded: dict[str, TaskSet] = {}

    def task_of(task_id: str, task_path: str | None) -> tuple[TaskSet, Task]:
        key = task_path or ""
        if tasks is not None and (task_path is None or isinstance(tasks, TaskSet)):
            ts = _tasks(tasks) if "tasks" not in state else state["tasks"]
            state["tasks"] = ts
            return ts, ts.task(task_id)
        if key not in loaded:
            loaded[key] = TaskSet(key)
        return loaded[key], loaded[key].task(task_id)

    async def sparring_judge_reward(
        prompts: list[Any], completions: list[Any], task_id: list[str], task_path: list[str] | None = None,
        **kwargs: Any,
    ) -> list[float]:  # fmt: skip
        sem = state.setdefault("sem", asyncio.Semaphore(concurrency))

        async def one(i: int) -> float:
            ts, task = task_of(task_id[i], task_path[i] if task_path else None)
            diff = WorkspaceDiff(files=completion_files(completions[i], target_files(task)))
            j = await judge_diff(ts.judge, task, diff, None, judge_s=600.0, retries=1, sem=sem)
            return float(j.result.reward) if j.result is not None else 0.0

        return list(await asyncio.gather(*(one(i) for i in range(len(completions)))))

    return sparring_judge_reward


# -- multi turn: rollout_func ---------------------------------------------------------------------


def rollout_reward(
    prompts: list[Any], completions: list[Any], sparring_reward: list[float], **kwargs: Any
) -> list[float]:
    """TRL reward function for :func:`make_rollout_func`: the judge's reward of each episode."""
    return [float(r) for r in sparring_reward]


class _Episode:
    """One rollout: its Environment and the token sequence so far (policy ids masked 1, env ids 0)."""

    def __init__(self, env: Environment, prompt_ids: list[int]) -> None:
        self.env = env
        self.prompt_ids = prompt_ids
        self.completion_ids: list[int] = []
        self.logprobs: list[float] = []
        self.mask: list[int] = []
        self.done = False

    def add(self, ids: list[int], logprobs: list[float] | None, policy: bool) -> None:
        self.completion_ids += ids
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        self.mask += [1 if policy else 0] * len(ids)


class SparringRollout:
    """TRL ``rollout_func``: multi-turn episodes in Sparring sandboxes with the trainer's live model
    (see the module docstring). Call it as ``rollout_func(prompts, trainer)``, as TRL does."""

    def __init__(self, tasks: str | Path | TaskSet, *, max_steps: int | None = None, max_turn_tokens: int = 256,
                 temperature: float | None = None) -> None:  # fmt: skip
        self.tasks = tasks if isinstance(tasks, TaskSet) else TaskSet(tasks, max_steps=max_steps)
        if max_steps is not None and isinstance(tasks, TaskSet):
            self.tasks.budget_overrides = {**self.tasks.budget_overrides, "max_steps": max_steps}
        self.max_turn_tokens = max_turn_tokens
        self.temperature = temperature
        self._by_prompt = {self._key(initial_messages(t)): t for t in self.tasks.tasks}
        self._runner: asyncio.Runner | None = None
        self._lock = threading.Lock()
        self.calls = 0
        self.last: list[Environment] = []
        """The last call's Environments (closed; their messages, traces and judgements stay readable)."""

    @staticmethod
    def _key(prompt: Any) -> str:
        msgs = (
            [{"role": m.get("role"), "content": m.get("content")} for m in prompt]
            if isinstance(prompt, list)
            else prompt
        )
        return json.dumps(msgs, sort_keys=True)

    def task_of(self, prompt: Any) -> Task:
        task = self._by_prompt.get(self._key(prompt))
        if task is None:
            raise ValueError("a prompt is not one of the tasks' first messages: build the dataset with "
                             "tasks_to_dataset(tasks) over the same tasks as make_rollout_func(tasks)")  # fmt: skip
        return task

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        with self._lock:  # one event loop owns this adapter's sandboxes
            if self._runner is None:
                self._runner = asyncio.Runner()
            self.calls += 1
            return self._runner.run(self._rollouts(prompts, trainer))

    async def _rollouts(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        tok = trainer.processing_class
        tok = getattr(tok, "tokenizer", tok)
        limit = int(getattr(trainer, "max_completion_length", None) or trainer.args.max_completion_length)
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0) or 0)
        # TRL repeats each prompt num_generations times in a row: the i-th copy is the i-th sample of its group
        episodes: list[_Episode] = []
        group_pos: list[int] = []
        for i, p in enumerate(prompts):
            group_pos.append(group_pos[-1] + 1 if i and self._key(prompts[i - 1]) == self._key(p) else 0)
        try:
            for p, j in zip(prompts, group_pos, strict=True):
                task = self.task_of(p)
                seed = step * 1000 + self.calls * 100 + j
                env = self.tasks.environment(task, seed)
                obs = await env.areset(seed)
                msgs, tools = _shown(tok, obs.messages, obs.tools)
                ids = tok.apply_chat_template(msgs, tools=tools, add_generation_prompt=True,
                                              tokenize=True, return_dict=False)  # fmt: skip
                episodes.append(_Episode(env, list(ids)))
            while active := [e for e in episodes if not e.done]:
                await self._turn(active, trainer, tok, limit)
            for e in episodes:
                if e.env.judgement is None:
                    await e.env.ajudge()
        finally:
            for e in episodes:
                await e.env.aclose()
        self.last = [e.env for e in episodes]
        rewards = [float(e.env.reward) if e.env.reward is not None else 0.0 for e in episodes]
        return {
            "prompt_ids": [e.prompt_ids for e in episodes],
            "completion_ids": [e.completion_ids for e in episodes],
            "logprobs": [e.logprobs for e in episodes],
            "env_mask": [e.mask for e in episodes],
            "sparring_reward": rewards,
            "sparring_status": [e.env.status for e in episodes],
            "sparring_task_id": [e.env.task.id for e in episodes],
        }

    def _stop_ids(self, tok: Any, model: Any) -> list[int]:
        ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
        gen = getattr(model, "generation_config", None)
        eos = getattr(gen, "eos_token_id", None)
        ids |= set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        end = tok.convert_tokens_to_ids("<|end|>") if "<|end|>" in tok.get_vocab() else None
        if end is not None:
            ids.add(end)
        return sorted(i for i in ids if i is not None)

    async def _turn(self, active: list[_Episode], trainer: Any, tok: Any, limit: int) -> None:
        """One assistant turn for every active episode (one batched ``generate``), then their steps."""
        import torch

        model = (
            trainer.accelerator.unwrap_model(trainer.model)
            if hasattr(trainer, "accelerator")
            else trainer.model
        )
        stop = self._stop_ids(tok, model)
        room = [limit - len(e.completion_ids) for e in active]
        new_tokens = max(1, min(self.max_turn_tokens, max(room)))
        seqs = [e.prompt_ids + e.completion_ids for e in active]
        width = max(len(s) for s in seqs)
        pad = tok.pad_token_id if tok.pad_token_id is not None else stop[0]
        device = next(model.parameters()).device
        input_ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=device)
        attention = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=device)
        temperature = self.temperature or float(getattr(trainer, "temperature", 1.0) or 1.0)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                out = model.generate(input_ids=input_ids, attention_mask=attention, max_new_tokens=new_tokens,
                                     do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                     eos_token_id=stop, pad_token_id=pad, output_scores=True,
                                     return_dict_in_generate=True)  # fmt: skip
        finally:
            model.train(was_training)
        gen = out.sequences[:, width:].tolist()
        logps = torch.stack([torch.log_softmax(s.float(), dim=-1) for s in out.scores], dim=1)
        for k, e in enumerate(active):
            ids = gen[k][: room[k]]
            cut = next((n + 1 for n, t in enumerate(ids) if t in stop), len(ids))
            ids = ids[:cut]
            lp = [float(logps[k, n, t]) for n, t in enumerate(ids)]
            e.add(ids, lp, policy=True)
            text = tok.decode(ids, skip_special_tokens=False)
            for s in stop:
                text = text.removesuffix(tok.decode([s], skip_special_tokens=False))
            n_before = len(e.env.messages)
            await e.env.astep(SampledTurn(text, TokenTrace(prompt_ids=[], completion_ids=ids, logprobs=lp)))
            if len(e.completion_ids) >= limit and not e.env.done:
                e.env.end("truncated")  # TRL's completion budget is spent: judge what the episode left
            if e.env.done:
                if e.env.judgement is None:
                    await e.env.ajudge()
                e.done = True
                continue
            env_ids = self._env_ids(tok, e, n_before, ended=bool(ids) and ids[-1] in stop)
            if len(e.completion_ids) + len(env_ids) >= limit:
                e.env.end("truncated")
                await e.env.ajudge()
                e.done = True
                continue
            e.add(env_ids, None, policy=False)

    def _env_ids(self, tok: Any, e: _Episode, n_before: int, *, ended: bool) -> list[int]:
        """The ids the environment appends after an assistant turn: the template's rendering of the
        conversation, from the end of that turn's last sampled token to the next generation prompt.
        The sampled ids are never re-tokenized; the template is prefix-preserving, so this suffix is
        exactly what the chat template puts between the two turns."""
        through_msgs, tools = _shown(tok, e.env.messages[: n_before + 1], e.env.tools)
        msgs, _ = _shown(tok, e.env.messages, e.env.tools)
        through = tok.apply_chat_template(through_msgs, tools=tools, tokenize=False,
                                          add_generation_prompt=False)  # fmt: skip
        full = tok.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=True)
        if not full.startswith(through):
            raise ValueError("the tokenizer's chat template is not prefix-preserving: multi-turn sequences "
                             "cannot be exact (use a template that keeps earlier turns byte-identical)")  # fmt: skip
        end_text = next(
            (tok.decode([s]) for s in self._stop_ids(tok, None) if tok.decode([s]) in through), ""
        )
        k = through.rfind(end_text) + len(end_text) if end_text else len(through)
        suffix = full[k:]
        if not ended and end_text:
            suffix = end_text + suffix  # the turn was cut before its end token: close it for the model
        return list(tok(suffix, add_special_tokens=False)["input_ids"])


def _shown(tok: Any, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> tuple[list[Any], Any]:
    """Messages and tools as the tokenizer's template is given them: a template that cannot show
    tools (SmolLM2's ChatML) gets them in the system prompt, calls written as Hermes ``<tool_call>``
    text, as the ``hf:`` policy does (:func:`sparring.policy.chat_codec.tools_in_text`)."""
    from sparring.chat_format.tool_formats import get_tool_format
    from sparring.policy.chat_codec import template_shows_tools, tools_in_text

    template = getattr(tok, "chat_template", None)
    if not isinstance(template, str) or template_shows_tools(template):
        return messages, tools
    return tools_in_text(messages, tools, get_tool_format("hermes")), None


def make_rollout_func(tasks: str | Path | TaskSet, **kwargs: Any) -> SparringRollout:
    """A TRL ``rollout_func`` over ``tasks`` (``max_steps=``, ``max_turn_tokens=``, ``temperature=``)."""
    return SparringRollout(tasks, **kwargs)


# -- environment_factory: see trl_environment (re-exported here, the one module users import) -----------

__all__ = [
    "SINGLE_TURN_SYSTEM", "SparringRollout", "SparringToolEnv", "completion_files", "environment_factory",
    "judge_reward", "make_rollout_func", "rollout_reward", "single_turn_prompt", "target_files", "tasks_to_dataset",
]  # fmt: skip
