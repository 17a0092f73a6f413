"""Asynchronous training: the next batch is sampled while the trainer updates, never more than
k policy versions behind (grpo.staleness = k), through the one staleness check of BatchLag's queue.

Real runs (tiny transformer, real sandboxes and judge, real GRPO updates: no version is bumped by
hand). Spies only record what the recipe samples and what it hands the trainer."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest

from sparring.train.config import load_config
from sparring.train.grpo import GRPOTrainer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]  # two short runs on a loaded machine

# `sparring demo --quick`'s shell-ops recipe, smaller: the warm start makes rewards vary (real updates)
CONFIG: dict[str, Any] = dict(
    family="shell-ops", n_train=4, n_heldout=1, heldout_samples=1, seed=3, sft_steps=80, sft_batch=16,
    sft_lr=3e-3, tasks_per_iteration=2, group_size=4, max_steps=3, heldout_max_steps=3, resample_rounds=1,
    checkpoint_every=0, monitor={"exporters": []}, async_rollouts=True, model={"max_new_tokens": 40},
    warm_start={"teacher": "noisy", "epsilon": 0.15, "forget_output": 0.5, "samples": 2, "passed_only": False},
)  # fmt: skip


@pytest.mark.parametrize("k", [1, 2])
def test_no_trained_sample_is_more_than_k_versions_old_and_sampling_overlaps_updates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, k: int
):
    from sparring.train import recipe

    iterations = k + 2
    sampled: list[list[str]] = []  # the ids of each iteration's batch, in sampling order
    seen: list[dict[str, Any]] = []
    sampling_now = threading.Event()  # set while a batch is being sampled
    real_step, real_sample = GRPOTrainer.step, recipe.sample_batch

    async def sample_batch(*args: Any, **kwargs: Any) -> Any:
        sampling_now.set()
        try:
            out = await real_sample(*args, **kwargs)
        finally:
            sampling_now.clear()
        sampled.append(sorted(t.id for t in out[0]))
        return out

    def step(self: GRPOTrainer, trajectories: list[Any]) -> dict[str, float]:
        # The update waits (bounded) until a batch is being sampled: only a recipe that samples while
        # the trainer updates gets past this; a sequential one (sample, then update) times out here.
        overlapped = sampling_now.wait(timeout=60)
        version = self.policy.version  # what the queue handed the trainer, before the trainer's own check
        metrics = real_step(self, trajectories)
        seen.append({
            "trainer": version, "ids": sorted(t.id for t in trajectories), "overlap": overlapped,
            "sampled": [t.policy_version for t in trajectories], "metrics": metrics, "after": self.policy.version,
        })  # fmt: skip
        return metrics

    monkeypatch.setattr(GRPOTrainer, "step", step)
    monkeypatch.setattr(recipe, "sample_batch", sample_batch)
    cfg = load_config(None, base={**CONFIG, "workdir": str(tmp_path / "w"), "iterations": iterations,
                                  "grpo": {"staleness": k, "lr": 5e-4, "minibatches": 2, "kl_coef": 0.05}})  # fmt: skip
    res = asyncio.run(recipe.run_rl(cfg))
    assert len(sampled) == iterations and len(seen) == iterations - k, (sampled, seen)
    assert all(s["overlap"] for s in seen), "an update ran without the next batch being sampled"
    # the update of iteration i trains exactly on the batch sampled at iteration i - k: nothing dropped
    assert [s["ids"] for s in seen] == sampled[: iterations - k]
    assert all(s["metrics"]["train/dropped_stale"] == 0.0 for s in seen)
    # the positive control: updates were real (the weights' version moved), so the bound is tested
    real = [s for s in seen if s["metrics"]["train/skipped"] == 0.0]
    assert real and all(s["after"] == s["trainer"] + 1 for s in real), seen
    assert seen[-1]["after"] - seen[0]["trainer"] == len(real)  # no other update moved the version
    # the bound, on the versions recorded on the trained samples
    lags = [s["trainer"] - v for s in seen for v in s["sampled"]]
    assert lags and min(lags) >= 0 and max(lags) <= k, seen
    for row in res.iterations:
        assert row["staleness_max"] is None or row["staleness_max"] <= k
        assert row["trainer_idle_s"] >= 0
