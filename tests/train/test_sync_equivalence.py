"""k = 0 is the synchronous recipe: the same trajectories, rewards and weights as sampling and updating by hand.

One real run (tiny transformer built here, real sandboxes, real judge, shell-ops tasks, real GRPO
updates) with ``grpo.staleness = 0`` and ``async_rollouts`` on, against a reference driven through
the public pieces one step after the other: sample a batch with policy version v, update, repeat.
Spies only record (the trainer's construction and each update); nothing is replaced.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from sparring.train.config import RLConfig, load_config
from sparring.train.grpo import GRPOTrainer
from sparring.trajectory import Trajectory

pytestmark = pytest.mark.slow

# `sparring demo --quick`'s shell-ops recipe, smaller: the warm start makes rewards vary (real updates).
# One turn per generate call: with batched sampling, which turns share a call (hence its seed and its
# padding, hence the tokens) depends on sandbox timing, and no two runs of a seed sample the same.
CONFIG: dict[str, Any] = dict(
    family="shell-ops", n_train=4, n_heldout=1, heldout_samples=1, seed=3, sft_steps=80, sft_batch=16,
    sft_lr=3e-3, iterations=2, tasks_per_iteration=2, group_size=4, max_steps=3, heldout_max_steps=3, resample_rounds=1,
    checkpoint_every=0, monitor={"exporters": []}, async_rollouts=True, model={"max_new_tokens": 40, "max_batch": 1},
    warm_start={"teacher": "noisy", "epsilon": 0.15, "forget_output": 0.5, "samples": 2, "passed_only": False},
    grpo={"lr": 5e-4, "minibatches": 2, "kl_coef": 0.05, "staleness": 0},
)  # fmt: skip


def _key(t: Trajectory) -> tuple[Any, ...]:
    """What a sampled trajectory is, token for token: ids, logprobs, status, reward, version (not its
    record id or group id: a scheduler call draws a fresh nonce for those, so two runs never share them)."""
    traces = tuple((tuple(x.prompt_ids), tuple(x.completion_ids), tuple(x.logprobs or ())) for x in t.traces)
    return (t.task_id, t.sample_index, t.status, t.reward, t.policy_version, traces)


def _batch(trajs: list[Trajectory]) -> list[tuple[Any, ...]]:
    return sorted(_key(t) for t in trajs)


async def _reference(cfg: RLConfig, run_id: str, model_dir: str, start: dict[str, Any], root: Path) -> Any:
    """The synchronous recipe by hand: for each iteration sample with version v, then update to v + 1."""
    from sparring.curriculum.sampler import BetaCurriculum
    from sparring.judge.pytest_judge import PytestJudge
    from sparring.policy.hf import HFPolicy
    from sparring.rollout.scheduler import RolloutScheduler
    from sparring.sandbox.config import make_backend
    from sparring.sandbox.pool import SandboxPool
    from sparring.store.sqlite import SQLiteStore
    from sparring.train.run_tasks import prepare_tasks
    from sparring.train.sampling import sample_batch

    m = cfg.model
    policy = HFPolicy(
        Path(model_dir), max_new_tokens=m.max_new_tokens, max_prompt_tokens=m.max_prompt_tokens,
        temperature=m.temperature, seed=cfg.seed, max_batch=m.max_batch,
    )  # fmt: skip
    policy.model.load_state_dict(start["weights"])  # the warm-started weights the run's trainer began from
    while policy.version < start["version"]:  # and its version (the warm start's SFT steps bumped it)
        policy.bump_version()
    trainer = GRPOTrainer(policy, cfg.grpo)
    train_tasks, _ = prepare_tasks(cfg, lambda s: None)
    curriculum = BetaCurriculum(train_tasks, seed=cfg.seed, **cfg.curriculum.model_dump())
    backend = make_backend(cfg.backend)
    pool = SandboxPool(backend, max_idle=cfg.concurrency, limits=cfg.sandbox_limits)
    judge = PytestJudge(backend, limits=cfg.sandbox_limits)
    # its own store: with the run's, the scheduler would skip the samples it already holds
    store = SQLiteStore(root / "reference.db")
    sched = RolloutScheduler(pool, judge, store, concurrency=cfg.concurrency, max_steps=cfg.max_steps)
    batches, updates = [], []
    try:
        for it in range(cfg.iterations):
            version = policy.version
            trajs, _, _ = await sample_batch(cfg, curriculum, sched, policy, run_id, it)
            assert all(t.policy_version == version for t in trajs)
            batches.append(_batch(trajs))
            updates.append(await asyncio.to_thread(trainer.step, trajs))
    finally:
        await pool.close()
        store.close()
    return batches, updates, policy


# the module's fixture runs the recipe and the reference (two short runs) on a loaded machine
TIMEOUT = pytest.mark.timeout(1500)


@pytest.fixture(scope="module")
def k0_and_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    import copy

    from sparring.train import recipe

    root = tmp_path_factory.mktemp("k0")
    cfg = load_config(None, base={**CONFIG, "workdir": str(root / "w")})
    seen: dict[str, Any] = {"batches": [], "updates": [], "trainer": None, "start": None}
    real_init, real_step, real_sample = GRPOTrainer.__init__, GRPOTrainer.step, recipe.sample_batch

    def init(self: GRPOTrainer, policy: Any, cfg_: Any = None) -> None:
        seen["start"] = {"weights": copy.deepcopy(policy.model.state_dict()), "version": policy.version}
        real_init(self, policy, cfg_)
        seen["trainer"] = self

    def step(self: GRPOTrainer, trajectories: list[Trajectory]) -> dict[str, float]:
        seen["updates"].append(
            {"version": self.policy.version, "sampled": [t.policy_version for t in trajectories]}
        )
        return real_step(self, trajectories)

    async def sample_batch(*args: Any, **kwargs: Any) -> Any:
        out = await real_sample(*args, **kwargs)
        seen["batches"].append(_batch(out[0]))
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(GRPOTrainer, "__init__", init)
        mp.setattr(GRPOTrainer, "step", step)
        mp.setattr(recipe, "sample_batch", sample_batch)
        res = asyncio.run(recipe.run_rl(cfg))
    batches, updates, policy = asyncio.run(_reference(cfg, res.run_id, res.model, seen["start"], root))
    return {"res": res, "seen": seen, "ref_batches": batches, "ref_updates": updates, "ref_policy": policy}


@TIMEOUT
def test_k0_updates_for_real_on_the_batch_it_just_sampled(k0_and_reference):
    res, seen = k0_and_reference["res"], k0_and_reference["seen"]
    assert len(seen["updates"]) == 2
    # the positive control: weights did move (a batch without reward variance would skip its update)
    assert any(row["grpo_skipped"] is False for row in res.iterations), res.iterations
    assert seen["trainer"].policy.version >= 1
    for u in seen["updates"]:  # synchronous: every trained sample comes from the trainer's own version
        assert u["sampled"] and set(u["sampled"]) == {u["version"]}, u


@TIMEOUT
def test_k0_is_the_synchronous_recipe_token_for_token_and_weight_for_weight(k0_and_reference):
    import torch

    d = k0_and_reference
    run_batches, ref_batches = d["seen"]["batches"], d["ref_batches"]
    assert len(run_batches) == len(ref_batches) == 2
    fields = ("task", "sample index", "status", "reward", "policy version", "tokens and logprobs")
    for it, (a, b) in enumerate(zip(run_batches, ref_batches, strict=True)):
        assert len(a) == len(b), f"iteration {it}: {len(a)} trajectories, the reference {len(b)}"
        for x, y in zip(a, b, strict=True):
            diff = [f for f, u, v in zip(fields, x, y, strict=True) if u != v]
            assert not diff, f"iteration {it}, {x[0]} #{x[1]}: {diff} differ"
    # (each batch's key holds every trajectory's status and reward: equal batches are equal rewards)
    for it, row in enumerate(d["res"].iterations):
        assert row["loss"] == d["ref_updates"][it].get("train/loss"), it
    assert d["seen"]["trainer"].policy.version == d["ref_policy"].version
    ran = d["seen"]["trainer"].policy.model.state_dict()
    ref = d["ref_policy"].model.state_dict()
    assert ran.keys() == ref.keys()
    moved = [k for k in ran if not torch.equal(ran[k], d["seen"]["start"]["weights"][k])]
    assert moved, "no weight moved: the comparison would prove nothing"
    assert all(torch.equal(ran[k], ref[k]) for k in ran), [k for k in ran if not torch.equal(ran[k], ref[k])]
