"""GRPO on stored trajectories (and SFT warm-start from oracle trajectories).

The objective. For each task a group of G rollouts is sampled with the
current policy pi_old and judged; rollout i gets reward r_i and the
group-relative advantage A_i (:mod:`sparring.train.advantages`). Every
assistant turn of rollout i is one sequence: its prompt (the conversation so
far, tool outputs included) is context only, and the loss goes on the turn's
completion tokens y_t, the model's own tokens::

    rho_t = pi_theta(y_t | prefix) / pi_old(y_t | prefix)
    L     = - avg_t min(rho_t A_i, clip(rho_t, 1 - eps_low, 1 + eps_high) A_i) + beta KL_t

where pi_old is the logprob stored in the trajectory's TokenTrace at sampling
time (so nothing is re-tokenised), ``avg`` is the variant's normaliser
(:mod:`sparring.train.losses`) and KL is taken against a frozen copy of the
starting weights when ``kl_coef > 0``. One :meth:`GRPOTrainer.step` is one
optimiser step: gradients are accumulated over micro-batches of turns (scaled
so the sum equals the loss of the whole batch), clipped, and applied with AdamW.

Only trajectories whose status is in TRAINABLE_STATUSES enter: an
infra_error / judge_error / policy_error says nothing about the policy and
must never be trained on as reward 0. Groups with zero reward variance have
zero advantage and are left out; a batch with no signal returns metrics with
``train/skipped = 1`` and leaves the weights (and version) untouched.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from sparring.chat_format import render_assistant, render_prompt
from sparring.policy.lora_files import is_lora
from sparring.train.advantages import grouped_advantages, zero_std_groups
from sparring.train.lora import adapters_disabled, trainable_parameters
from sparring.train.losses import get_loss
from sparring.train.tree_credit import Node, get_credit
from sparring.trajectory import TRAINABLE_STATUSES, Trajectory

if TYPE_CHECKING:
    import torch

    from sparring.policy.hf import HFPolicy


class GRPOConfig(BaseModel):
    """Hyper-parameters of one GRPO update."""

    model_config = ConfigDict(extra="forbid")

    lr: float = Field(1e-4, gt=0, description="AdamW learning rate.")
    loss: Literal["grpo", "dr_grpo", "dapo"] = Field(
        "grpo", description="Loss variant (sparring.train.losses)."
    )
    clip_eps: float = Field(0.2, gt=0, lt=1, description="Lower clip range eps_low of the ratio.")
    clip_eps_high: float | None = Field(
        None, gt=0, description="Upper clip range eps_high; None: 0.28 for dapo, clip_eps otherwise."
    )
    kl_coef: float = Field(
        0.0, ge=0, description="Weight beta of the k3 KL to the starting weights (0: off)."
    )
    max_grad_norm: float = Field(1.0, gt=0, description="Clip the global gradient norm to this.")
    normalize_std: bool = Field(
        True, description="Divide advantages by the group std (GRPO); False: Dr. GRPO."
    )
    micro_batch_tokens: int = Field(
        4096,
        ge=1,
        description="Padded tokens per forward pass (accumulation unit), in GRPO and the SFT warm start.",
    )
    weight_decay: float = Field(0.0, ge=0, description="AdamW weight decay.")
    max_completion_tokens: int | None = Field(
        None, ge=1, description="dr_grpo's constant normaliser; None: the policy's max_new_tokens."
    )
    staleness: int = Field(
        0,
        ge=0,
        description="Bound k: a batch is trained on up to k updates after it was sampled (0: synchronous).",
    )
    epochs: int = Field(1, ge=1, description="Passes over each batch (GRPO's mu); >1 makes the clip matter.")
    minibatches: int = Field(
        1, ge=1, description="Optimiser steps per pass: the batch's turns split this many ways."
    )
    credit: Literal["flat", "tree"] = Field(
        "flat",
        description="Credit assignment (sparring.train.tree_credit): flat = GRPO's episode advantage on every "
        "turn (forked branches are not trained); tree = each turn's advantage from forked rollouts' values.",
    )

    def eps_high(self) -> float:
        if self.clip_eps_high is not None:
            return self.clip_eps_high
        return 0.28 if self.loss == "dapo" else self.clip_eps


@dataclass
class _Seq:
    """One training sequence: a turn's tokens, the stored old logprobs and its advantage."""

    prompt_ids: list[int]
    completion_ids: list[int]
    old_logprobs: list[float] | None = None
    advantage: float = 0.0


def _micro_batches(seqs: list[_Seq], budget: int) -> list[list[_Seq]]:
    """Greedy packing by length: each batch's padded size (n * longest) stays within budget."""
    out: list[list[_Seq]] = []
    cur: list[_Seq] = []
    longest = 0
    for s in sorted(seqs, key=lambda s: len(s.prompt_ids) + len(s.completion_ids)):
        n = len(s.prompt_ids) + len(s.completion_ids)
        if cur and max(longest, n) * (len(cur) + 1) > budget:
            out.append(cur)
            cur, longest = [], 0
        cur.append(s)
        longest = max(longest, n)
    if cur:
        out.append(cur)
    return out


def _keep_kwarg(model: Any) -> str | None:
    """The name under which ``model``'s forward takes "compute logits for the last N positions only"
    (``logits_to_keep``, ``num_logits_to_keep`` before transformers 4.50), or None."""
    import inspect

    base = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft (LoRA) wrapper
    try:
        params = inspect.signature(base.forward).parameters
    except (TypeError, ValueError):
        return None
    return next((k for k in ("logits_to_keep", "num_logits_to_keep") if k in params), None)


def completion_logprobs(
    model: Any, seqs: Sequence[_Seq], pad_id: int, device: str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """log pi(y_t | prefix) of every completion token, padded to [B, C_max], with its mask.

    The prompt and completion are concatenated and right-padded; the logits at
    position P-1+t score completion token t. Logits over the vocabulary are computed
    only from the shortest prompt's last position on: a prompt position scores nothing,
    and a real model's vocabulary (49k for SmolLM2, 150k for Qwen) makes its
    [batch, length, vocab] logits the biggest tensor of a step. Each row is then
    normalised on its own completion positions only.
    """
    import torch

    lengths = [len(s.prompt_ids) + len(s.completion_ids) for s in seqs]
    L, C = max(lengths), max(len(s.completion_ids) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id, dtype=torch.long, device=device)
    attn = torch.zeros((len(seqs), L), dtype=torch.long, device=device)
    for b, s in enumerate(seqs):
        ids[b, : lengths[b]] = torch.tensor(s.prompt_ids + s.completion_ids, dtype=torch.long)
        attn[b, : lengths[b]] = 1
    first = min(len(s.prompt_ids) for s in seqs) - 1  # the first position that scores a completion token
    kwarg = _keep_kwarg(model)
    if kwarg is not None and first > 0:
        logits = model(input_ids=ids, attention_mask=attn, **{kwarg: L - first}).logits
        off = L - logits.shape[1]  # logits[:, i] is position off + i
    else:
        logits, off = model(input_ids=ids, attention_mask=attn).logits, 0
    rows = []
    mask = torch.zeros((len(seqs), C), dtype=torch.float32, device=device)
    for b, s in enumerate(seqs):
        p, c = len(s.prompt_ids), len(s.completion_ids)
        seg = logits[b, p - 1 - off : p + c - 1 - off].float()
        target = torch.tensor(s.completion_ids, dtype=torch.long, device=device)
        lp = torch.gather(seg, -1, target.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(seg, dim=-1)
        rows.append(torch.nn.functional.pad(lp, (0, C - c)))
        mask[b, :c] = 1.0
    return torch.stack(rows) * mask, mask


def _finish_step(model: Any, optimizer: Any, total_weight: float, max_grad_norm: float) -> float:
    """Turn accumulated sum-gradients into mean-gradients, clip, step; returns the pre-clip norm."""
    import torch

    params = [p for p in model.parameters() if p.grad is not None]
    for p in params:
        p.grad.div_(max(total_weight, 1e-12))
    norm = float(torch.nn.utils.clip_grad_norm_(params, max_grad_norm))
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm


class GRPOTrainer:
    """Applies one GRPO update per :meth:`step` to an :class:`HFPolicy`'s weights, in place."""

    def __init__(self, policy: HFPolicy, cfg: GRPOConfig | None = None) -> None:
        import copy

        import torch

        self.policy = policy
        self.cfg = cfg or GRPOConfig()
        self.loss_fn = get_loss(self.cfg.loss)
        self.optimizer = torch.optim.AdamW(
            trainable_parameters(policy.model), lr=self.cfg.lr, weight_decay=self.cfg.weight_decay
        )
        self.ref_model = None
        # With LoRA the frozen base is the KL reference (adapters disabled): no second copy of the weights.
        if self.cfg.kl_coef > 0 and not is_lora(policy.model):
            self.ref_model = copy.deepcopy(policy.model).eval()
            self.ref_model.requires_grad_(False)

    def _sequences(
        self, trajs: list[Trajectory], advs: list[list[float | None]]
    ) -> tuple[list[_Seq], set[str], int]:
        """One sequence per traced turn with its advantage (a turn whose advantage is None is not this
        trajectory's to train: a forked branch's shared prefix)."""
        seqs: list[_Seq] = []
        used: set[str] = set()
        missing = 0
        for traj, per_turn in zip(trajs, advs, strict=True):
            for i, tr in enumerate(traj.traces):
                adv = per_turn[i] if i < len(per_turn) else None
                if adv is None:
                    continue
                if not tr.completion_ids or not tr.prompt_ids:
                    continue
                old = (
                    tr.logprobs
                    if tr.logprobs is not None and len(tr.logprobs) == len(tr.completion_ids)
                    else None
                )
                missing += old is None
                seqs.append(_Seq(tr.prompt_ids, tr.completion_ids, old, adv))
                used.add(traj.id)
        return seqs, used, missing

    def step(self, trajectories: list[Trajectory]) -> dict[str, float]:
        """GRPO updates on a batch of judged trajectories (any mix of groups and statuses).

        ``epochs`` x ``minibatches`` optimiser steps (one by default), all against the
        stored sampling logprobs; the policy version is bumped once per batch."""
        cfg = self.cfg
        trainable = [t for t in trajectories if t.status in TRAINABLE_STATUSES and t.reward is not None]
        # The staleness bound: samples more than k updates old are dropped; younger ones are corrected
        # by the importance ratio pi_theta / pi_behaviour (their stored logprobs), clipped as in PPO.
        lags = [t.lag(self.policy.version) for t in trainable]
        fresh = [t for t in trainable if not t.is_stale(self.policy.version, cfg.staleness)]
        dropped_stale = len(trainable) - len(fresh)
        staleness_mean = sum(lags) / len(lags) if lags else 0.0
        trainable = fresh
        branches = [t for t in trainable if t.parent_id is not None]
        if cfg.credit == "flat":
            trainable = [
                t for t in trainable if t.parent_id is None
            ]  # forked branches: only tree credit uses them
        roots = [t for t in trainable if t.parent_id is None]
        keys = [t.group_id or t.id for t in roots]
        rewards = [float(t.reward or 0.0) for t in roots]  # None was filtered above
        advs = grouped_advantages(keys, rewards, normalize_std=cfg.normalize_std)
        zero, groups = zero_std_groups(keys, rewards)
        nodes = [Node(t.id, t.group_id or t.id, float(t.reward or 0.0), len(t.traces), t.parent_id, t.branch_turn)
                 for t in trainable]  # fmt: skip
        per_turn = get_credit(cfg.credit)(nodes, normalize_std=cfg.normalize_std)
        live = {n.group for n in nodes if any(per_turn.get(n.id, ()))}  # groups with reward variance
        signal = [t for t, n in zip(trainable, nodes, strict=True) if n.group in live]
        seqs, used, missing = self._sequences(signal, [per_turn[t.id] for t in signal])
        metrics: dict[str, float] = {
            "train/loss": 0.0,
            "train/grad_norm": 0.0,
            "train/tokens": 0.0,
            "train/trajectories": float(len(used)),
            "train/trainable": float(len(trainable)),
            "train/groups": float(groups),
            "train/frac_zero_std_groups": zero / groups if groups else 0.0,
            "train/clip_frac": 0.0,
            "train/kl": 0.0,
            "train/skipped_untrainable": float(len(trajectories) - len(trainable)),
            "train/missing_logprobs": float(missing),
            "train/turns": float(len(seqs)),
            "train/reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
            "train/adv_abs_mean": sum(abs(a) for a in advs) / len(advs) if advs else 0.0,
            "train/skipped": 0.0,
            "train/dropped_stale": float(dropped_stale),
            "train/staleness_mean": float(staleness_mean),
            "train/staleness_max": float(max((t.lag(self.policy.version) for t in trainable), default=0)),
            "train/branches": float(len(branches)),
        }
        if not seqs:
            metrics["train/skipped"] = 1.0
            metrics["train/policy_version"] = float(self.policy.version)
            return metrics
        policy = self.policy
        totals = {"loss": 0.0, "w": 0.0, "clip": 0.0, "kl": 0.0, "tokens": 0.0, "norm": 0.0, "updates": 0.0}
        order = list(range(len(seqs)))
        rng = random.Random(policy.version)  # the same batch splits the same way on a rerun
        with policy.lock:
            for _ in range(cfg.epochs):
                rng.shuffle(order)
                k = min(cfg.minibatches, len(seqs))
                for j in range(k):
                    part = [seqs[i] for i in order[j::k]]
                    self._update(part, totals)
            policy.bump_version()
        metrics.update(
            {
                "train/loss": totals["loss"] / max(totals["w"], 1e-12),
                "train/tokens": totals["tokens"] / cfg.epochs,
                "train/clip_frac": totals["clip"] / max(totals["tokens"], 1),
                "train/kl": totals["kl"] / max(totals["tokens"], 1),
                "train/grad_norm": totals["norm"] / max(totals["updates"], 1),
                "train/updates": totals["updates"],
                "train/policy_version": float(policy.version),
            }
        )
        return metrics

    def _update(self, seqs: list[_Seq], totals: dict[str, float]) -> None:
        """One optimiser step over ``seqs`` (gradient accumulated over micro-batches); adds to ``totals``."""
        import torch

        cfg, policy, model = self.cfg, self.policy, self.policy.model
        pad_id = policy.tokenizer.pad_token_id or 0
        max_tokens = cfg.max_completion_tokens or policy.max_new_tokens
        total_w = 0.0
        model.train()
        try:
            self.optimizer.zero_grad(set_to_none=True)
            for mb in _micro_batches(seqs, cfg.micro_batch_tokens):
                new, mask = completion_logprobs(model, mb, pad_id, policy.device)
                old = new.detach().clone()  # a turn without stored logprobs is on-policy: ratio 1
                for b, s in enumerate(mb):
                    if s.old_logprobs is not None:
                        old[b, : len(s.old_logprobs)] = torch.tensor(s.old_logprobs, dtype=old.dtype)
                ref = None
                if self.ref_model is not None:
                    with torch.no_grad():
                        ref, _ = completion_logprobs(self.ref_model, mb, pad_id, policy.device)
                elif cfg.kl_coef > 0:  # LoRA: the reference is the base, adapters switched off
                    with torch.no_grad(), adapters_disabled(model):
                        ref, _ = completion_logprobs(model, mb, pad_id, policy.device)
                adv = torch.tensor([s.advantage for s in mb], dtype=torch.float32, device=new.device)
                out = self.loss_fn(
                    new,
                    old,
                    adv,
                    mask,
                    eps_low=cfg.clip_eps,
                    eps_high=cfg.eps_high(),
                    ref_logprobs=ref,
                    kl_coef=cfg.kl_coef,
                    max_tokens=max_tokens,
                )
                (out.loss * out.weight).backward()
                total_w += out.weight
                totals["loss"] += float(out.loss.detach()) * out.weight
                totals["w"] += out.weight
                totals["clip"] += out.clip_frac * out.tokens
                totals["kl"] += out.kl * out.tokens
                totals["tokens"] += out.tokens
            totals["norm"] += _finish_step(model, self.optimizer, total_w, cfg.max_grad_norm)
            totals["updates"] += 1
        finally:
            model.eval()


# --------------------------------------------------------------------------- SFT warm start


def sft_examples(
    traj: Trajectory | Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()
) -> list[tuple[str, str]]:
    """(prompt, completion) text pairs, one per assistant turn: the context so far and that turn."""
    messages = traj.messages if isinstance(traj, Trajectory) else list(traj)
    return [
        (render_prompt(messages[:i], tools), render_assistant(m))
        for i, m in enumerate(messages)
        if m.get("role") == "assistant"
    ]


class SFTTrainer:
    """Cross-entropy on completion tokens only (token-level mean over the batch); warm-starts a policy.

    Minimises  -1/N sum_t log pi_theta(y_t | prompt, y_<t)  over the N
    completion tokens of the batch; the prompt is context and gets no loss.
    """

    def __init__(
        self,
        policy: HFPolicy,
        lr: float = 1e-3,
        *,
        max_grad_norm: float = 1.0,
        micro_batch_tokens: int = 4096,
        weight_decay: float = 0.0,
    ) -> None:
        import torch

        self.policy = policy
        self.max_grad_norm = max_grad_norm
        self.micro_batch_tokens = micro_batch_tokens
        self.optimizer = torch.optim.AdamW(policy.model.parameters(), lr=lr, weight_decay=weight_decay)

    def _encode(self, examples: Sequence[tuple[str, str]]) -> list[_Seq]:
        tok, policy = self.policy.tokenizer, self.policy
        limit = int(getattr(policy.model.config, "max_position_embeddings", 0) or 1 << 30)
        seqs = []
        for prompt, completion in examples:
            p = tok.encode(prompt, add_special_tokens=False)[-policy.max_prompt_tokens :]
            c = tok.encode(completion, add_special_tokens=False)[: max(limit - len(p), 0)]
            if p and c:
                seqs.append(_Seq(p, c))
        return seqs

    def _nll_sum(self, seqs: list[_Seq], backward: bool) -> tuple[float, int]:
        import torch

        pad_id = self.policy.tokenizer.pad_token_id or 0
        total, n = 0.0, 0
        for mb in _micro_batches(seqs, self.micro_batch_tokens):
            with torch.set_grad_enabled(backward):
                lp, mask = completion_logprobs(self.policy.model, mb, pad_id, self.policy.device)
                nll = -(lp * mask).sum()
                if backward:
                    nll.backward()
            total += float(nll.detach())
            n += int(mask.sum())
        return total, n

    def evaluate(self, examples: Sequence[tuple[str, str]]) -> float:
        """Mean per-token cross-entropy of the completions, no update."""
        with self.policy.lock:
            total, n = self._nll_sum(self._encode(examples), backward=False)
        return total / max(n, 1)

    def step(self, examples: Sequence[tuple[str, str]]) -> dict[str, float]:
        """One optimiser step; ``sft/loss`` is the batch loss before the update."""
        seqs = self._encode(examples)
        if not seqs:
            return {"sft/loss": 0.0, "sft/tokens": 0.0, "sft/grad_norm": 0.0, "sft/skipped": 1.0}
        policy = self.policy
        with policy.lock:
            policy.model.train()
            try:
                self.optimizer.zero_grad(set_to_none=True)
                total, n = self._nll_sum(seqs, backward=True)
                norm = _finish_step(policy.model, self.optimizer, float(n), self.max_grad_norm)
            finally:
                policy.model.eval()
            policy.bump_version()
        return {
            "sft/loss": total / max(n, 1),
            "sft/tokens": float(n),
            "sft/grad_norm": norm,
            "sft/examples": float(len(seqs)),
            "sft/skipped": 0.0,
            "sft/policy_version": float(policy.version),
        }
