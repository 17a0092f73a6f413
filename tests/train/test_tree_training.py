"""`credit: tree` inside a real training run (issue 37): the training rollouts are forked after turn 1,
the branches are stored with their root, counted apart (sampled tool calls) and trained on; the held-out
curve of `eval_every` pairs each pass rate with the calls sampled so far.

A real run: tiny transformer, real sandboxes, forks and judge, real GRPO updates (a spy only records
what the recipe hands the trainer)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sparring.train.config import load_config
from sparring.train.grpo import GRPOTrainer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

# test_async_rollouts' small shell-ops recipe (its warm start makes rewards vary), synchronous
CONFIG: dict[str, Any] = dict(
    family="shell-ops", n_train=4, n_heldout=1, heldout_samples=1, seed=3, sft_steps=80, sft_batch=16,
    sft_lr=3e-3, tasks_per_iteration=2, group_size=4, max_steps=3, heldout_max_steps=3, resample_rounds=0,
    checkpoint_every=0, monitor={"exporters": []}, async_rollouts=False, model={"max_new_tokens": 40},
    warm_start={"teacher": "noisy", "epsilon": 0.15, "forget_output": 0.5, "samples": 2, "passed_only": False},
    iterations=2, eval_every=1, credit="tree", branch_at="1", branches=2,
)  # fmt: skip


def test_tree_credit_trains_on_forked_branches_and_counts_their_calls_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    from sparring.train import recipe

    seen: list[dict[str, Any]] = []
    real_step = GRPOTrainer.step

    def step(self: GRPOTrainer, trajectories: list[Any]) -> dict[str, float]:
        metrics = real_step(self, trajectories)
        seen.append({"trajs": list(trajectories), "metrics": metrics})
        return metrics

    monkeypatch.setattr(GRPOTrainer, "step", step)
    cfg = load_config(None, base={**CONFIG, "workdir": str(tmp_path / "w")})
    assert cfg.grpo.credit == "tree"
    res = asyncio.run(recipe.run_rl(cfg))
    assert len(seen) == 2
    for s in seen:
        roots = [t for t in s["trajs"] if t.parent_id is None]
        branches = [t for t in s["trajs"] if t.parent_id is not None]
        assert len(roots) == 2 * 4  # tasks x group: the GRPO groups
        # every root that reached turn 1 before ending was forked twice there, each branch naming it
        ids = {t.id for t in roots}
        assert branches and all(b.parent_id in ids and b.branch_turn == 1 for b in branches)
        assert s["metrics"]["train/branches"] == float(len(branches))
    for row, s in zip(res.iterations, seen, strict=True):
        held = sum(len(t.steps) for t in s["trajs"])  # what the trajectories hold: a branch repeats turn 1
        shared = sum(  # the calls of each branch's shared turn (its root's first assistant message)
            len(next(m for m in t.messages if m["role"] == "assistant").get("tool_calls") or [])
            for t in s["trajs"]
            if t.parent_id is not None
        )
        assert row["sampled_tool_calls"] == held - shared > 0
    curve = res.heldout_curve
    calls = [r["sampled_tool_calls"] for r in res.iterations]
    assert [(p["iteration"], p["sampled_tool_calls"]) for p in curve] == [
        (0, 0),
        (1, calls[0]),
        (2, sum(calls)),
    ]
    assert (
        curve[-1]["pass_rate"] == res.heldout["after_rl"]
        and curve[0]["pass_rate"] == res.heldout["before_rl"]
    )
