"""A LoRA policy's files: the merged model, and the adapter alone beside it (peft, imported lazily).

Saving a LoRA policy (``HFPolicy.save``) writes the *merged* weights, so the
directory stays a plain model any server or ``hf:PATH`` loads, plus the adapter
alone in ``adapter/`` (what vLLM's ``load_lora_adapter`` takes and what a resume
loads back onto the base). It lives in policy/ because the policy saves itself;
training (:mod:`sparring.train.lora`, which adds adapters) imports it from here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparring.errors import ConfigError

ADAPTER_DIR = "adapter"


def is_lora(model: Any) -> bool:
    """Whether ``model`` is a peft model with adapters."""
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


def save_lora_policy(model: Any, out: Path) -> None:
    """Merged weights in ``out`` (a plain model dir) and the adapter alone in ``out/adapter``."""
    import copy

    model.save_pretrained(str(out / ADAPTER_DIR), safe_serialization=True)
    merged = copy.deepcopy(model).merge_and_unload()
    merged.save_pretrained(str(out), safe_serialization=True)


def load_adapter(model: Any, directory: Path) -> None:
    """Load adapter weights saved by :func:`save_lora_policy` into a LoRA model, in place."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    f = directory / ADAPTER_DIR / "adapter_model.safetensors"
    if not f.is_file():
        raise ConfigError(f"{directory} has no LoRA adapter ({ADAPTER_DIR}/adapter_model.safetensors)")
    result = set_peft_model_state_dict(model, load_file(str(f)))
    unexpected = list(getattr(result, "unexpected_keys", []) or [])
    if unexpected:
        raise ConfigError(f"the adapter in {directory} does not match the model: unexpected {unexpected[:3]}")
