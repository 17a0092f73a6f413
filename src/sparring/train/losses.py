"""Policy-gradient loss variants, one small function each, in a registry.

All share the PPO clipped surrogate per completion token t of sequence i::

    rho_t   = exp(logp_new_t - logp_old_t)              importance ratio
    s_t     = min(rho_t * A_i, clip(rho_t, 1 - eps_low, 1 + eps_high) * A_i)
    l_t     = -s_t + beta * KL_t                       (beta = kl_coef, optional)
    KL_t    = exp(ref_t - new_t) - (ref_t - new_t) - 1 (the k3 estimator, >= 0, unbiased)

and differ only in how l_t is averaged over the batch (mask selects the
model's own completion tokens; the prompt and tool outputs are masked out):

    grpo     mean over sequences of (mean over that sequence's tokens)
             -- the original GRPO; longer answers get less weight per token
    dr_grpo  sum over all tokens / (n_sequences * max_tokens)
             -- Dr. GRPO: a constant normaliser removes the length bias
    dapo     sum over all tokens / n_tokens (token-level mean over the batch),
             with asymmetric "clip-higher" eps_low=0.2, eps_high=0.28 (DAPO)

Each returns a :class:`LossOutput` whose ``weight`` is the count its
normaliser averages over (sequences or tokens), so a trainer accumulating
gradients over micro-batches scales each micro-batch loss by
``weight / total_weight`` and gets exactly the loss of the whole batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


@dataclass
class LossOutput:
    """A scalar loss with what it averaged over and diagnostics (plain floats)."""

    loss: torch.Tensor
    weight: float
    clip_frac: float
    kl: float
    tokens: int


def _token_terms(
    logprobs_new: torch.Tensor,
    logprobs_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    eps_low: float,
    eps_high: float,
    ref_logprobs: torch.Tensor | None,
    kl_coef: float,
) -> tuple[torch.Tensor, float, float]:
    """Per-token loss l_t (masked), fraction of tokens whose ratio was clipped, mean KL."""
    import torch

    mask = mask.to(logprobs_new.dtype)
    adv = advantages if advantages.dim() == logprobs_new.dim() else advantages.unsqueeze(-1)
    ratio = torch.exp(logprobs_new - logprobs_old)
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = -torch.min(ratio * adv, clipped * adv)
    n = mask.sum().clamp(min=1.0)
    kl_mean = 0.0
    if ref_logprobs is not None and kl_coef:
        d = ref_logprobs - logprobs_new
        kl = torch.exp(d) - d - 1.0
        per_token = per_token + kl_coef * kl
        kl_mean = float((kl.detach() * mask).sum() / n)
    with torch.no_grad():
        # the clip is *active* (the min picks the constant clipped branch): above 1+eps_high with A > 0,
        # below 1-eps_low with A < 0 (TRL's clip_ratio/high and /low)
        a = adv.expand_as(ratio)
        was_clipped = ((ratio > 1.0 + eps_high) & (a > 0)) | ((ratio < 1.0 - eps_low) & (a < 0))
        clip_frac = float((was_clipped.to(mask.dtype) * mask).sum() / n)
    return per_token * mask, clip_frac, kl_mean


LossFn = Callable[..., LossOutput]


def grpo(
    logprobs_new: torch.Tensor,
    logprobs_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    max_tokens: int | None = None,
) -> LossOutput:
    """GRPO: per-sequence token mean, then mean over sequences. ``weight`` = n_sequences."""
    terms, clip_frac, kl = _token_terms(
        logprobs_new, logprobs_old, advantages, mask, eps_low, eps_high, ref_logprobs, kl_coef
    )
    per_seq = terms.sum(-1) / mask.sum(-1).clamp(min=1).to(terms.dtype)
    return LossOutput(per_seq.mean(), float(terms.shape[0]), clip_frac, kl, int(mask.sum()))


def dr_grpo(
    logprobs_new: torch.Tensor,
    logprobs_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    max_tokens: int | None = None,
) -> LossOutput:
    """Dr. GRPO: token sum / (n_sequences * max_tokens); ``max_tokens`` defaults to the padded length."""
    terms, clip_frac, kl = _token_terms(
        logprobs_new, logprobs_old, advantages, mask, eps_low, eps_high, ref_logprobs, kl_coef
    )
    const = float(max_tokens or terms.shape[-1])
    return LossOutput(
        terms.sum() / (terms.shape[0] * const), float(terms.shape[0]), clip_frac, kl, int(mask.sum())
    )


def dapo(
    logprobs_new: torch.Tensor,
    logprobs_old: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float = 0.2,
    eps_high: float = 0.28,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    max_tokens: int | None = None,
) -> LossOutput:
    """DAPO: token-level mean over the whole batch, clip-higher. ``weight`` = n_tokens."""
    terms, clip_frac, kl = _token_terms(
        logprobs_new, logprobs_old, advantages, mask, eps_low, eps_high, ref_logprobs, kl_coef
    )
    n = float(mask.sum())
    return LossOutput(terms.sum() / max(n, 1.0), n, clip_frac, kl, int(n))


LOSSES: dict[str, LossFn] = {"grpo": grpo, "dr_grpo": dr_grpo, "dapo": dapo}


def get_loss(name: str) -> LossFn:
    """The loss function registered as ``name``; ConfigError naming the choices otherwise."""
    from sparring.errors import ConfigError

    try:
        return LOSSES[name]
    except KeyError:
        raise ConfigError(f"unknown loss {name!r}: choose one of {', '.join(sorted(LOSSES))}") from None
