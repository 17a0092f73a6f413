"""TRL: a real ``trl.GRPOTrainer`` trains on Sparring tasks in each of its three modes, with real
sandboxes and the real judge, through exactly the snippets README's "Use from your trainer" shows.

The model is Sparring's tiny Qwen2-architecture model (built from a config, its
tokenizer trained locally, carrying the Sparring chat template), taught for a
few steps to answer with tool calls, so its samples really call tools and their
rewards differ. The task scores the fraction of four properties its answer file
has, so GRPO has a signal; each mode runs 2 steps and the parameters move.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch

from integration_support import TOOL_REPLIES, custom_tool_replies, make_scribble_task, warm_up_tool_model
from readme_snippets import snippet

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def scribble_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trl") / "tasks"
    make_scribble_task(out / "scribble")
    return out


@pytest.fixture(scope="module")
def tool_model_dir(tiny_qwen2_model_dir, scribble_dir, tmp_path_factory) -> Path:
    from sparring.tasks.loader import load_task

    task = load_task(scribble_dir / "scribble")
    return warm_up_tool_model(tiny_qwen2_model_dir, tmp_path_factory.mktemp("trl-model") / "m", task)


@pytest.fixture(scope="module")
def mixed_dir(tmp_path_factory, tool_use_tasks) -> Path:
    """The scribble task (built-in tools) and a tool-use task (the store's own tools): two tool sets."""
    import shutil

    from sparring.tasks.loader import find_tasks

    out = tmp_path_factory.mktemp("trl-mixed") / "tasks"
    make_scribble_task(out / "scribble")
    task = find_tasks(tool_use_tasks)[0]
    shutil.copytree(task.path, out / task.id)
    return out


@pytest.fixture(scope="module")
def custom_tool_model_dir(tiny_qwen2_model_dir, mixed_dir, tmp_path_factory) -> Path:
    """The tiny model taught both prompts, rendered with the tools TRL renders (the generated methods):
    scribble's write_file replies and the store's first reference calls (find_customer, list_orders...),
    so in training it calls the task's own tools."""
    import inspect

    from sparring.integrations import trl as st
    from sparring.tasks.loader import find_tasks

    envs = st.environment_factory(mixed_dir)
    assert isinstance(envs, dict)
    tasks = {t.id: t for t in find_tasks(mixed_dir)}

    def trl_tools(task_id: str) -> list[Any]:  # what GRPOTrainer collects off the task's class
        env = next(cls for cls in envs.values() if task_id in cls.task_ids)()
        names = [n for n, _ in inspect.getmembers(type(env), inspect.isfunction) if not n.startswith("_")]
        return [getattr(env, n) for n in names if n not in ("reset", "get_reward")]

    store = next(t for i, t in tasks.items() if i != "scribble")
    lessons = [(tasks["scribble"], TOOL_REPLIES, trl_tools("scribble")),
               (store, custom_tool_replies(store), trl_tools(store.id))]  # fmt: skip
    out = tmp_path_factory.mktemp("trl-custom-model") / "m"
    return warm_up_tool_model(tiny_qwen2_model_dir, out, tasks["scribble"], lessons=lessons)


def run_snippet(name: str, workdir: Path, tasks: Path, model_dir: Path, **config: Any) -> tuple[Any, dict]:
    """Execute README's snippet ``name`` in ``workdir`` (its ``tasks/`` is ``tasks``) with ``model``,
    ``tokenizer`` and ``args`` given; returns the trainer and the parameters before training."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tasks").symlink_to(tasks)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir))
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    before = {k: v.detach().clone() for k, v in model.named_parameters()}
    defaults = dict(
        output_dir=str(workdir / "out"), use_cpu=True, max_steps=2, per_device_train_batch_size=4,
        num_generations=4, learning_rate=1e-2, logging_steps=1, report_to="none", save_strategy="no",
        seed=0, temperature=1.0,
    )  # fmt: skip
    args = GRPOConfig(**{**defaults, **config})
    ns: dict[str, Any] = {"model": model, "tokenizer": tokenizer, "args": args}
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        exec(compile(snippet(name), f"README:{name}", "exec"), ns)
    finally:
        os.chdir(cwd)
    return ns["trainer"], before


def moved(trainer: Any, before: dict[str, torch.Tensor]) -> list[str]:
    after = dict(trainer.model.named_parameters())
    return [k for k, v in before.items() if not torch.equal(v, after[k].detach())]


def rewards_logged(trainer: Any, key: str) -> list[float]:
    return [h[key] for h in trainer.state.log_history if key in h]


def test_reward_function_mode(scribble_dir, tool_model_dir, tmp_path):
    trainer, before = run_snippet("trl-reward", tmp_path / "w", scribble_dir, tool_model_dir,
                                  max_completion_length=48)  # fmt: skip
    assert trainer.state.global_step == 2 and moved(trainer, before)
    stds = rewards_logged(trainer, "reward_std")
    assert len(stds) == 2 and any(s > 0 for s in stds), trainer.state.log_history


def test_rollout_func_mode(scribble_dir, tool_model_dir, tmp_path):
    trainer, before = run_snippet("trl-rollout", tmp_path / "w", scribble_dir, tool_model_dir,
                                  max_completion_length=160)  # fmt: skip
    assert trainer.state.global_step == 2 and moved(trainer, before)
    assert any(s > 0 for s in rewards_logged(trainer, "reward_std")), trainer.state.log_history


def test_environment_factory_mode(scribble_dir, tool_model_dir, tmp_path):
    trainer, before = run_snippet("trl-environment", tmp_path / "w", scribble_dir, tool_model_dir,
                                  max_completion_length=96, max_tool_calling_iterations=2)  # fmt: skip
    assert trainer.state.global_step == 2 and moved(trainer, before)
    assert any(s > 0 for s in rewards_logged(trainer, "reward_std")), trainer.state.log_history


def test_environment_factory_mode_with_custom_tools(mixed_dir, custom_tool_model_dir, tmp_path):
    """README's environment_factory glue, unchanged, over tasks with two tool sets (built-in; the store's
    [[custom_tools]]): TRL gets one class per tool set, renders each prompt with exactly its task's tools,
    and the model's calls of the store's tools run its tool server in the sandbox."""
    from sparring.env import Environment
    from sparring.tasks.loader import find_tasks
    from sparring.tasks.spec import BUILTIN_TOOLS

    trainer, before = run_snippet("trl-environment", tmp_path / "w", mixed_dir, custom_tool_model_dir,
                                  max_completion_length=96, max_tool_calling_iterations=2,
                                  per_device_train_batch_size=8)  # fmt: skip
    assert trainer.state.global_step == 2 and moved(trainer, before)
    assert isinstance(trainer.environment_factories, dict) and len(trainer.environment_factories) == 2
    offered = {cls.tool_set: {s["function"]["name"] for s in Environment(t).tools}
               for t in find_tasks(mixed_dir) for cls in trainer.environment_factories.values()
               if t.id in cls.task_ids}  # fmt: skip
    assert {name: {m.__name__ for m in tools} for name, tools in trainer._env_tools.items()} == offered
    steps = [s for pool in trainer._environment_pool.values() for env in pool for s in env.tool_steps]
    custom = [s for s in steps if s.name not in BUILTIN_TOOLS and s.name != "submit"]
    assert custom and any(s.exit_code == 0 for s in custom), [(s.name, s.error) for s in steps]


def test_rollout_sequences_are_token_exact(scribble_dir, tool_model_dir):
    """What make_rollout_func returns is one exact sequence per episode: the policy's segments are the
    ids it sampled (as the Environment recorded them, never re-tokenized), the environment's segments
    are the chat template's text between turns, the completion limit holds, and TRL's group layout
    (each prompt repeated num_generations times) gives one task per group with distinct seeds."""
    from types import SimpleNamespace

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from sparring.integrations import trl as st

    tok = AutoTokenizer.from_pretrained(str(tool_model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(tool_model_dir))
    trainer = SimpleNamespace(processing_class=tok, model=model, max_completion_length=120, temperature=1.0,
                              state=SimpleNamespace(global_step=0))  # fmt: skip
    torch.manual_seed(0)
    rollout = st.make_rollout_func(scribble_dir, max_steps=3)
    prompt = st.tasks_to_dataset(scribble_dir)[0]["prompt"]
    out = rollout([prompt] * 4, trainer)
    assert len({e.seed for e in rollout.last}) == 4 and {e.task.id for e in rollout.last} == {"scribble"}
    multi_turn = 0
    for i, env in enumerate(rollout.last):
        ids, mask, lps = out["completion_ids"][i], out["env_mask"][i], out["logprobs"][i]
        assert len(ids) == len(mask) == len(lps) <= 120 and mask[0] == 1
        policy = [t for t, m in zip(ids, mask, strict=True) if m]
        assert policy == [t for tr in env.traces for t in tr.completion_ids]  # exactly what was sampled
        assert all(lp == 0.0 for lp, m in zip(lps, mask, strict=True) if not m)
        assert all(lp < 0.0 for lp, m in zip(lps, mask, strict=True) if m)
        assert out["prompt_ids"][i] == tok.apply_chat_template(env.messages[:2], tools=env.tools,
                                                               add_generation_prompt=True, tokenize=True,
                                                               return_dict=False)  # fmt: skip
        env_text = [tok.decode(ids[a:b]) for a, b in _runs(mask, 0)]
        for text in env_text:  # each environment segment: the end of a turn, tool/user turns, next header
            assert text.startswith(("\n<|tool|>\n", "\n<|user|>\n", "<|end|>\n")) and text.endswith(
                "<|assistant|>\n"
            )
        full = tok.apply_chat_template(
            env.messages, tools=env.tools, tokenize=False, add_generation_prompt=True
        )
        assert all(t in full for t in env_text)  # the template's own text between the turns
        multi_turn += len(env_text) > 0
        assert out["sparring_reward"][i] == env.reward and out["sparring_status"][i] == env.status
    assert multi_turn  # some episode really went on after a tool result


def _runs(mask: list[int], value: int) -> list[tuple[int, int]]:
    """The [start, end) spans where ``mask`` equals ``value``."""
    spans, start = [], None
    for i, m in enumerate([*mask, 1 - value]):
        if m == value and start is None:
            start = i
        elif m != value and start is not None:
            spans.append((start, i))
            start = None
    return spans
