"""Trainer benchmark: GRPO update throughput (tokens/s) on a tiny model, and the same update step
with TRL's GRPO loss on identical inputs, side by side, and the size of the step's vocabulary logits
(``sparring train-bench`` /
``python benchmarks/train_bench.py``; one JSON object).

Inputs: ``groups`` x ``group_size`` synthetic trajectories (random prompt and
completion token ids of fixed lengths, rewards 0/1 with variance in every group,
stored logprobs = the model's own, i.e. on-policy). Each measured step is one
full optimiser step: forward, loss, backward, clip, AdamW. The TRL side feeds
the very same logits-derived per-token logprobs, advantages and mask into TRL's
loss function (when ``trl`` is installed: ``pip install -e '.[bench]'``) and runs
the same backward and optimiser step, so the difference is the loss code only.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any


def _trajectories(
    policy: Any, groups: int, group_size: int, prompt_len: int, completion_len: int, seed: int
) -> list[Any]:
    import torch

    from sparring.train.grpo import _Seq, completion_logprobs
    from sparring.trajectory import TokenTrace, Trajectory

    rng = random.Random(seed)
    vocab = int(policy.model.config.vocab_size)
    out = []
    for g in range(groups):
        prompt = [rng.randrange(10, vocab) for _ in range(prompt_len)]
        for i in range(group_size):
            comp = [rng.randrange(10, vocab) for _ in range(completion_len)]
            with torch.no_grad():
                lp, _ = completion_logprobs(policy.model, [_Seq(prompt, comp)], 0)
            trace = TokenTrace(prompt_ids=prompt, completion_ids=comp, logprobs=lp[0].tolist())
            out.append(Trajectory(task_id=f"t{g}", task_digest="d", policy="bench", status="ok",
                                  reward=float(i % 2), group_id=f"g{g}", traces=[trace]))  # fmt: skip
    return out


def _trl_loss_fn() -> Any:
    """A callable (new, old, adv, mask) -> loss built on TRL's GRPO loss code, or None without trl."""
    try:
        import trl  # noqa: F401
        from trl.trainer.grpo_trainer import GRPOTrainer as TRLGRPOTrainer
    except Exception:
        return None
    return TRLGRPOTrainer


def run_train_bench(groups: int = 4, group_size: int = 8, prompt_len: int = 192, completion_len: int = 32,
                    hidden: int = 64, layers: int = 2, repeats: int = 5, seed: int = 0) -> dict[str, Any]:  # fmt: skip
    import torch

    from sparring.policy.hf import HFPolicy
    from sparring.train.grpo import GRPOConfig, GRPOTrainer
    from sparring.train.model import build_tiny_model

    with tempfile.TemporaryDirectory(prefix="sparring-train-bench-") as tmp:
        model_dir = build_tiny_model(Path(tmp) / "m", seed=seed, hidden=hidden, layers=layers, heads=4)
        policy = HFPolicy(model_dir, max_new_tokens=completion_len)
        trajs = _trajectories(policy, groups, group_size, prompt_len, completion_len, seed)
        trainer = GRPOTrainer(policy, GRPOConfig(lr=1e-5, loss="dapo", staleness=10**9))
        trainer.step(trajs)  # warm-up (allocator, first-call overheads)
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            m = trainer.step(trajs)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        completion_tokens = groups * group_size * completion_len
        total_tokens = groups * group_size * (prompt_len + completion_len)
        res: dict[str, Any] = {
            "groups": groups, "group_size": group_size, "prompt_len": prompt_len, "completion_len": completion_len,
            "hidden": hidden, "layers": layers, "threads": torch.get_num_threads(), "repeats": repeats,
            "sparring_step_s": round(med, 4),
            "sparring_completion_tokens_per_s": round(completion_tokens / med, 1),
            "sparring_total_tokens_per_s": round(total_tokens / med, 1),
            "sparring_loss": round(float(m["train/loss"]), 6),
        }  # fmt: skip
        res.update(_logits_footprint(policy.model, trajs))
        res.update(_trl_side(policy, trajs, repeats, completion_tokens))
        return res


def _logits_footprint(model: Any, trajs: list[Any]) -> dict[str, Any]:
    """The vocabulary logits the output head produces for the step's batch: through
    completion_logprobs (completion positions only) and, for comparison, a plain forward over every
    position (what it computed before); measured on the head's output tensors, in MB."""
    import torch

    from sparring.train.grpo import _Seq, completion_logprobs

    seen: list[int] = []
    hook = model.get_output_embeddings().register_forward_hook(
        lambda _m, _i, out: seen.append(out.numel() * out.element_size())
    )
    try:
        seqs = [_Seq(t.traces[0].prompt_ids, t.traces[0].completion_ids) for t in trajs]
        with torch.no_grad():
            completion_logprobs(model, seqs, 0)
            kept = seen.pop()
            ids = torch.tensor([s.prompt_ids + s.completion_ids for s in seqs])
            model(input_ids=ids)
            full = seen.pop()
    finally:
        hook.remove()
    return {"logits_mb": round(kept / 2**20, 2), "logits_mb_all_positions": round(full / 2**20, 2)}


def _trl_side(policy: Any, trajs: list[Any], repeats: int, completion_tokens: int) -> dict[str, Any]:
    """The same update with TRL's GRPO loss (``GRPOTrainer._compute_loss``) on identical inputs."""
    import types

    import torch

    from sparring.train.advantages import grouped_advantages
    from sparring.train.grpo import _Seq, completion_logprobs

    trl_cls = _trl_loss_fn()
    if trl_cls is None:
        return {"trl": "not installed (pip install -e '.[bench]')"}
    import trl

    seqs = [_Seq(t.traces[0].prompt_ids, t.traces[0].completion_ids, t.traces[0].logprobs) for t in trajs]
    advs = grouped_advantages([t.group_id for t in trajs], [t.reward for t in trajs])
    model = policy.model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    prompt = torch.tensor([s.prompt_ids for s in seqs])
    comp = torch.tensor([s.completion_ids for s in seqs])
    old = torch.tensor([s.old_logprobs for s in seqs], dtype=torch.float32)
    adv = torch.tensor(advs, dtype=torch.float32)
    from collections import defaultdict

    class _FakeTRL:
        """The attributes TRL's ``GRPOTrainer._compute_loss`` reads, for DAPO on one process, no KL."""

        beta = 0.0
        epsilon_low, epsilon_high = 0.2, 0.28
        loss_type = "dapo"
        importance_sampling_level = "token"
        max_completion_length = comp.shape[1]
        top_entropy_quantile = 1.0
        off_policy_mask_threshold = None
        aux_loss_enabled = False
        use_vllm = False
        vllm_importance_sampling_correction = False
        current_gradient_accumulation_steps = 1
        _entropy_bonus_enabled = False
        use_adaptive_entropy = False
        args = types.SimpleNamespace(delta=None, steps_per_generation=1, use_bias_correction_kl=False)
        accelerator = types.SimpleNamespace(num_processes=1, gather=lambda x: x, reduce=lambda x, **k: x)

        def __init__(self) -> None:
            self.model = model
            self._metrics: dict[str, Any] = defaultdict(lambda: defaultdict(list))

        def _get_per_token_logps_and_entropies(self, model_: Any, *a: Any, **k: Any) -> Any:
            lp, _ = completion_logprobs(model_, seqs, 0)
            return lp, torch.zeros_like(lp), None

    fake = _FakeTRL()
    inputs = {"prompt_ids": prompt, "prompt_mask": torch.ones_like(prompt), "completion_ids": comp,
              "completion_mask": torch.ones_like(comp), "advantages": adv, "old_per_token_logps": old,
              "num_items_in_batch": torch.tensor(float(comp.numel()))}  # fmt: skip
    try:
        loss_fn = trl_cls._compute_loss
        times = []
        loss = None
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(fake, model, inputs)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            if i:
                times.append(time.perf_counter() - t0)
    except Exception as e:  # TRL's internals move between versions; report, never crash the benchmark
        return {
            "trl": f"trl {trl.__version__}: its loss could not be driven here: {type(e).__name__}: {str(e)[:200]}"
        }
    med = statistics.median(times)
    return {"trl_version": trl.__version__, "trl_step_s": round(med, 4),
            "trl_completion_tokens_per_s": round(completion_tokens / med, 1),
            "trl_loss": round(float(loss.detach()), 6) if loss is not None else None}  # fmt: skip
