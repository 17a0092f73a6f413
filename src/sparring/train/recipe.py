"""The RL recipe: generate tasks → build / load a policy → SFT warm start on
oracle trajectories → [sample → rollout → judge → GRPO update] × iterations,
with held-out pass rate measured before and after RL.

setup → warm start → train → evaluate, one readable function each (torchtune-style).
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparring.curriculum.sampler import BetaCurriculum
from sparring.env.tools import tool_schemas
from sparring.errors import JudgeError
from sparring.judge.pytest_judge import PytestJudge
from sparring.monitor.metrics import JsonlSink, iteration_metrics
from sparring.policy.scripted import OraclePolicy
from sparring.rollout.scheduler import RolloutScheduler, RolloutSummary
from sparring.sandbox.local import LocalBackend
from sparring.sandbox.pool import SandboxPool
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.loader import Task, find_tasks
from sparring.train.config import RLConfig

Log = Callable[[str], None]


@dataclass
class RunResult:
    iterations: list[dict[str, Any]] = field(default_factory=list)
    heldout: dict[str, float] = field(default_factory=dict)
    sft: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    run_id: str = ""
    store: str = ""
    model: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "iterations": self.iterations,
            "heldout": self.heldout,
            "sft": self.sft,
            "seconds": round(self.seconds, 3),
            "store": self.store,
            "model": self.model,
        }


def prepare_tasks(cfg: RLConfig, log: Log) -> tuple[list[Task], list[Task]]:
    """Generate (or reuse) train and held-out tasks; held-out ones come from a disjoint seed range."""
    from sparring.tasks.families import generate, get_family

    # The generator's version is part of the cache key: a changed generator never reuses old tasks.
    root = cfg.workdir / "tasks" / f"{cfg.family}-v{get_family(cfg.family).version}-s{cfg.seed}"
    out = []
    for name, n, seed in (("train", cfg.n_train, cfg.seed), ("heldout", cfg.n_heldout, cfg.seed + 100_003)):
        d = root / f"{name}-{n}"
        if d.is_dir() and len(list(d.glob("*/task.toml"))) == n:
            out.append(find_tasks(d))
        else:
            log(f"generating {n} {name} tasks ({cfg.family})")
            out.append(generate(cfg.family, n, seed, d))
    train, held = out
    train_ids = {t.id for t in train}
    held = [t for t in held if t.id not in train_ids] or held
    return train, held


def prepare_model(cfg: RLConfig, tasks: list[Task], log: Log) -> Path:
    if cfg.model.path is not None:
        return cfg.model.path
    from sparring.train.model import build_tiny_model, default_corpus

    m = cfg.model
    d = cfg.workdir / "models" / f"tiny-h{m.hidden}-l{m.layers}-v{m.vocab_size}-s{cfg.seed}"
    if (d / "config.json").is_file():
        return d
    log(f"building a tiny model in {d}")
    corpus = default_corpus(tool_schemas(list(tasks[0].spec.tools)) if tasks else None, seed=cfg.seed)
    for t in tasks:
        corpus += [p.read_text(errors="replace") for p in sorted(t.workspace.rglob("*.py"))]
        corpus.append(t.spec.instruction)
    tmp = d.with_name(d.name + f".tmp-{uuid.uuid4().hex[:6]}")
    build_tiny_model(tmp, corpus, seed=cfg.seed, vocab_size=m.vocab_size, hidden=m.hidden, layers=m.layers, heads=m.heads)
    tmp.rename(d)
    return d


async def evaluate(sched: RolloutScheduler, tasks: list[Task], policy: Any, run_id: str, seed: int) -> RolloutSummary:
    return await sched.run(tasks, policy, 1, run_id=run_id, seed=seed)


async def run_rl(cfg: RLConfig, log: Log = lambda s: None, on_iteration: Callable[[dict[str, Any]], None] | None = None) -> RunResult:
    from sparring.policy.hf import HFPolicy
    from sparring.train.grpo import GRPOTrainer, SFTTrainer, sft_examples

    t0 = time.perf_counter()
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    run_id = f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    res = RunResult(run_id=run_id)
    train_tasks, held = prepare_tasks(cfg, log)
    model_dir = prepare_model(cfg, train_tasks + held, log)
    res.model = str(model_dir)
    store_path = cfg.workdir / "store.db"
    res.store = str(store_path)
    store = SQLiteStore(store_path)
    store.start_run(run_id, cfg.model_dump(mode="json"))
    sink = JsonlSink(cfg.workdir / "metrics" / f"{run_id}.jsonl")
    backend = LocalBackend()
    pool = SandboxPool(backend, max_idle=cfg.concurrency, limits=cfg.sandbox_limits)
    judge = PytestJudge(backend, limits=cfg.sandbox_limits)
    sched = RolloutScheduler(pool, judge, store, concurrency=cfg.concurrency, max_steps=cfg.max_steps)
    eval_sched = RolloutScheduler(pool, judge, store, concurrency=cfg.concurrency, max_steps=cfg.heldout_max_steps)
    m = cfg.model
    policy = HFPolicy(
        model_dir, max_new_tokens=m.max_new_tokens, max_prompt_tokens=m.max_prompt_tokens,
        temperature=m.temperature, seed=cfg.seed,
    )  # fmt: skip
    try:
        # Warm start: imitate oracle trajectories so the tiny model learns the tool-call format.
        if cfg.sft_steps > 0:
            log("warm start: oracle rollouts + SFT")
            oracle_sched = RolloutScheduler(pool, judge, store, concurrency=cfg.concurrency)  # the tasks' own budgets
            demo = await oracle_sched.run(train_tasks, OraclePolicy(), 1, run_id=run_id + "-oracle", seed=cfg.seed)
            tools = tool_schemas(list(train_tasks[0].spec.tools))
            examples = [ex for t in demo.trajectories if t.passed for ex in sft_examples(t, tools)]
            if not examples:
                raise JudgeError("warm start: the oracle solved none of the training tasks; check the tasks with `sparring tasks check`")
            sft = SFTTrainer(policy, lr=cfg.sft_lr)
            rng = random.Random(cfg.seed)
            losses = []
            for _ in range(cfg.sft_steps):
                batch = rng.sample(examples, min(cfg.sft_batch, len(examples)))
                losses.append(float((await asyncio.to_thread(sft.step, batch))["sft/loss"]))
            res.sft = {
                "oracle_pass_rate": demo.pass_rate, "examples": len(examples), "steps": cfg.sft_steps,
                "loss_first": losses[0] if losses else None, "loss_last": losses[-1] if losses else None,
            }  # fmt: skip

        log("held-out evaluation before RL")
        before = await evaluate(eval_sched, held, policy, run_id + "-heldout-before", cfg.seed + 7)
        res.heldout["before_rl"] = before.pass_rate
        res.heldout["before_rl_reward"] = before.reward_mean

        curriculum = BetaCurriculum(train_tasks, seed=cfg.seed)
        trainer = GRPOTrainer(policy, cfg.grpo)
        for it in range(cfg.iterations):
            batch = curriculum.sample(cfg.tasks_per_iteration)
            summary = await sched.run(batch, policy, cfg.group_size, run_id=run_id, seed=cfg.seed * 1000 + it)
            curriculum.update((t.task_id, t.passed) for t in summary.trajectories if t.trainable)
            metrics = iteration_metrics(summary.trajectories, summary.seconds)
            if cfg.rl:
                metrics.update(await asyncio.to_thread(trainer.step, summary.trajectories))
            metrics.update(curriculum.metrics())
            row = {
                "iteration": it,
                "reward_mean": metrics["rollout/reward_mean"],
                "pass_rate": metrics["rollout/pass_rate"],
                "statuses": metrics["rollout/statuses"],
                "rollouts": len(summary.trajectories),
                "throughput_per_min": metrics["rollout/throughput_per_min"],
                "seconds": summary.seconds,
                "policy_version": policy.version,
                "loss": metrics.get("train/loss"),
                "grpo_skipped": bool(metrics.get("train/skipped", 0.0)) if cfg.rl else None,
                "zero_std_groups": metrics.get("train/frac_zero_std_groups"),
            }
            sink.log(it, metrics)
            res.iterations.append(row)
            if on_iteration:
                on_iteration(row)

        log("held-out evaluation after RL")
        after = await evaluate(eval_sched, held, policy, run_id + "-heldout-after", cfg.seed + 7)
        res.heldout["after_rl"] = after.pass_rate
        res.heldout["after_rl_reward"] = after.reward_mean
        res.seconds = time.perf_counter() - t0
        store.finish_run(run_id, res.to_json())
        return res
    finally:
        await pool.close()
        sink.close()
        store.close()
