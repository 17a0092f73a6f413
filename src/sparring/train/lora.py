"""LoRA for the RL stage (peft): train low-rank adapters on frozen warm-started weights.

``apply_lora`` wraps an :class:`~sparring.policy.hf.HFPolicy`'s model in a peft
``PeftModel`` in place; only the adapter weights then require gradients, so the
GRPO optimiser holds (and checkpoints) only those. The frozen base doubles as
the KL reference: under :func:`adapters_disabled` the same model computes with
the adapters off, so no second copy of the weights is kept (TRL does the same).

Saving and loading a LoRA policy's files is the policy's own business
(:mod:`sparring.policy.lora_files`, which ``HFPolicy.save`` uses). peft is
imported lazily; it is in the ``[train]`` extra.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field

from sparring.errors import ConfigError
from sparring.policy.lora_files import is_lora


class LoRASettings(BaseModel):
    """Adapter shape; the defaults adapt every attention projection of a Llama-style model."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(8, ge=1, description="Adapter rank.")
    alpha: float = Field(16.0, gt=0, description="Scale numerator: the update is (alpha / r) B A.")
    dropout: float = Field(
        0.0, ge=0, lt=1, description="Dropout on the adapter input (0 keeps sampling and training identical)."
    )
    target_modules: list[str] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"],
        description="Module names (suffixes) that get adapters.",
    )


def apply_lora(policy: Any, settings: LoRASettings, seed: int = 0) -> None:
    """Wrap ``policy.model`` with fresh adapters (B = 0, so the policy is unchanged until trained)."""
    try:
        import torch
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ConfigError("model.lora needs peft: pip install 'sparring[train]'") from None
    if is_lora(policy.model):
        raise ConfigError("the policy already has LoRA adapters")
    names = {n.rsplit(".", 1)[-1] for n, _ in policy.model.named_modules()}
    unknown = [m for m in settings.target_modules if m not in names]
    if unknown:
        raise ConfigError(
            f"model.lora.target_modules {unknown} are not modules of this model (it has e.g. {sorted(names)[:8]})"
        )
    cfg = LoraConfig(
        r=settings.r,
        # peft annotates an int but scales by any number; whether mypy sees that annotation depends on
        # the order it reaches peft in, so a cast (not an ignore, which would be unused in the other order).
        lora_alpha=cast(Any, settings.alpha),
        lora_dropout=settings.dropout,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    with policy.lock:
        state = torch.get_rng_state()
        torch.manual_seed(seed)  # the adapters' A matrices are random: same seed, same adapters
        try:
            policy.model = get_peft_model(policy.model, cfg).eval()
        finally:
            torch.set_rng_state(state)


def trainable_parameters(model: Any) -> list[Any]:
    """The parameters an optimiser should hold: all of a plain model's, only the adapters of a LoRA one."""
    return [p for p in model.parameters() if p.requires_grad]


def adapters_disabled(model: Any) -> AbstractContextManager[Any]:
    """Context in which a LoRA model computes with its base weights only (a no-op for plain models)."""
    return model.disable_adapter() if is_lora(model) else nullcontext()
