"""Asynchronous training: the next batch is sampled while the trainer updates, never more than
k policy versions behind (grpo.staleness = k), through the one staleness check of BatchLag's queue."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sparring.train.config import load_config
from sparring.train.grpo import GRPOTrainer

pytestmark = pytest.mark.slow

CONFIG: dict[str, Any] = dict(
    family="shell-ops", n_train=4, n_heldout=1, heldout_samples=1, seed=3, sft_steps=3, sft_batch=2,
    tasks_per_iteration=2, group_size=2, max_steps=2, heldout_max_steps=2, resample_rounds=0,
    checkpoint_every=0, monitor={"exporters": []},
    model={"hidden": 32, "layers": 1, "heads": 4, "vocab_size": 600, "max_new_tokens": 12},
    warm_start={"teacher": "noisy", "epsilon": 0.5, "samples": 1, "passed_only": False},
)  # fmt: skip


def test_no_trained_sample_is_more_than_k_versions_old_and_sampling_overlaps_updates(tmp_path: Path, monkeypatch):
    import threading

    from sparring.train import recipe

    k = 1
    seen: list[dict[str, Any]] = []
    sampling_now = threading.Event()  # set while a batch is being sampled
    real_step, real_sample = GRPOTrainer.step, recipe.sample_batch

    async def sample_batch(*args: Any, **kwargs: Any) -> Any:
        sampling_now.set()
        try:
            return await real_sample(*args, **kwargs)
        finally:
            sampling_now.clear()

    def step(self: GRPOTrainer, trajectories: list[Any]) -> dict[str, float]:
        # The update waits (bounded) until a batch is being sampled: only a recipe that samples while
        # the trainer updates gets past this; a sequential one (sample, then update) times out here.
        overlapped = sampling_now.wait(timeout=60)
        version = self.policy.version  # what the queue handed the trainer, before its own check
        seen.append({"trainer": version, "sampled": [t.policy_version for t in trajectories], "overlap": overlapped})
        metrics = real_step(self, trajectories)
        if metrics["train/skipped"]:
            # a tiny model in a few seconds rarely finds reward variance; an update that moves no
            # weight still counts as a new version here, so versions advance as in a learning run
            self.policy.bump_version()  # type: ignore[attr-defined]
        return metrics

    monkeypatch.setattr(GRPOTrainer, "step", step)
    monkeypatch.setattr(recipe, "sample_batch", sample_batch)
    cfg = load_config(None, base={**CONFIG, "workdir": str(tmp_path / "w"), "iterations": 4,
                                  "grpo": {"staleness": k, "minibatches": 2}})  # fmt: skip
    res = asyncio.run(recipe.run_rl(cfg))
    assert len(seen) == 3, seen  # iterations 1..3 update on the batch of the iteration before
    assert all(s["overlap"] for s in seen), "an update ran without the next batch being sampled"
    lags = [s["trainer"] - v for s in seen for v in s["sampled"]]
    assert lags and min(lags) >= 0 and max(lags) <= k, seen
    assert [s["trainer"] for s in seen] == [seen[0]["trainer"] + i for i in range(3)]  # versions moved
    for row in res.iterations:
        assert row["staleness_max"] is None or row["staleness_max"] <= k
        assert row["trainer_idle_s"] >= 0
