"""The loop closes: the tiny model's own multi-turn rollouts (real sandboxes, real judge,
real SQLite store) feed a GRPO update that changes the weights the next rollout uses."""

from __future__ import annotations

import asyncio

import torch

from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.hf import HFPolicy
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.pool import SandboxPool
from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore
from sparring.train.grpo import GRPOConfig, GRPOTrainer
from sparring.train.model import build_tiny_model


def test_rollouts_of_the_model_feed_a_grpo_update(backend, clamp_task, tmp_path):
    model = build_tiny_model(tmp_path / "m", seed=0, hidden=32, layers=2, heads=4)
    pol = HFPolicy(model, max_new_tokens=16, seed=3)
    store = SQLiteStore(tmp_path / "s.db")

    async def go():
        pool = SandboxPool(backend)
        try:
            return await RolloutScheduler(pool, PytestJudge(backend), store, concurrency=2, max_steps=2).run(
                [clamp_task], pol, 3
            )
        finally:
            await pool.close()

    summary = asyncio.run(go())
    assert summary.stored == 3 and set(summary.statuses) <= {"ok", "truncated"}
    stored = store.search(TrajQuery(policy=pol.name))[1]
    assert len(stored) == 3 and all(t.traces for t in stored)
    for t in stored:
        for tr in t.traces:
            assert len(tr.completion_ids) == len(tr.logprobs or ()) > 0
    # A random tiny model solves nothing, so the judge gives every sample 0 and the group has
    # no signal: GRPO must skip it rather than train on noise.
    trainer = GRPOTrainer(pol, GRPOConfig(lr=1e-2))
    assert trainer.step(stored)["train/skipped"] == 1.0 and pol.version == 0
    # With one sample rewarded (as a judge pass would), the same stored samples move the weights.
    stored[0].reward = 1.0
    before = [p.detach().clone() for p in pol.model.parameters()]
    m = trainer.step(stored)
    assert m["train/skipped"] == 0.0 and m["train/trajectories"] == 3 and pol.version == 1
    assert any(not torch.equal(a, b) for a, b in zip(before, pol.model.parameters(), strict=True))
    store.close()
