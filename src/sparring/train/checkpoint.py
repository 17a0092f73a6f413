"""Checkpoints that resume exactly: weights, optimizer, RNG, curriculum, monitor and data position.

Layout (one directory per checkpoint, written to a temp dir and renamed, so a
kill mid-write leaves the previous checkpoint intact)::

    WORKDIR/checkpoints/iter-00003/
        model/         save_pretrained weights + tokenizer (loadable as hf:PATH)
        trainer.pt     optimizer state, torch RNG state
        state.json     iteration done, run id, policy version, curriculum,
                       monitor, pending (stale) batches, result rows so far
    WORKDIR/checkpoints/latest   name of the newest complete checkpoint

Everything else the loop does is a deterministic function of this state
(rollout sampling is seeded from (seed, iteration, sample, step); the judge is
deterministic), so a run resumed from iteration i reaches the same weights as
one that never stopped.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path
from typing import Any

from sparring import atomicfile
from sparring.errors import ConfigError

LATEST = "latest"


def checkpoint_root(workdir: Path) -> Path:
    return Path(workdir) / "checkpoints"


def save_checkpoint(
    workdir: Path, iteration: int, policy: Any, optimizer: Any, state: dict[str, Any], keep: int = 2
) -> Path:
    """Write checkpoint ``iter-{iteration}`` atomically and point ``latest`` at it; keep the newest ``keep``."""
    import torch

    root = checkpoint_root(workdir)
    root.mkdir(parents=True, exist_ok=True)
    name = f"iter-{iteration:05d}"
    tmp = root / f".{name}.tmp-{uuid.uuid4().hex[:6]}"
    policy.save(tmp / "model")
    torch.save({"optimizer": optimizer.state_dict(), "torch_rng": torch.get_rng_state()}, tmp / "trainer.pt")
    (tmp / "state.json").write_text(json.dumps(state, default=str))
    final = root / name
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    atomicfile.write_text(root / LATEST, name)
    done = sorted(p for p in root.glob("iter-*") if p.is_dir())
    for old in done[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def latest_checkpoint(workdir: Path) -> Path | None:
    root = checkpoint_root(workdir)
    f = root / LATEST
    if not f.is_file():
        return None
    d = root / f.read_text().strip()
    return d if (d / "state.json").is_file() else None


def load_state(ckpt: Path) -> dict[str, Any]:
    try:
        return dict(json.loads((ckpt / "state.json").read_text()))
    except (OSError, json.JSONDecodeError) as e:
        raise ConfigError(f"checkpoint {ckpt} is unreadable: {e}") from None


def load_trainer(ckpt: Path, optimizer: Any) -> None:
    import torch

    data = torch.load(ckpt / "trainer.pt", weights_only=False)
    optimizer.load_state_dict(data["optimizer"])
    torch.set_rng_state(data["torch_rng"])


def load_weights(ckpt: Path, policy: Any, sub: str = "model") -> None:
    """Copy the checkpoint's weights (``ckpt/sub``) into a loaded policy's model, in place."""
    from safetensors.torch import load_file

    files = sorted((ckpt / sub).glob("*.safetensors"))
    if not files:
        raise ConfigError(f"checkpoint {ckpt} has no weights ({sub}/*.safetensors)")
    sd: dict[str, Any] = {}
    for f in files:
        sd.update(load_file(str(f)))
    missing, unexpected = policy.model.load_state_dict(sd, strict=False)
    # tied embeddings are saved once; anything else missing is a real mismatch
    real_missing = [k for k in missing if "lm_head" not in k]
    if real_missing or unexpected:
        raise ConfigError(
            f"checkpoint {ckpt} does not match the model: missing {real_missing[:3]}, unexpected {unexpected[:3]}"
        )
    if hasattr(policy.model, "tie_weights"):
        policy.model.tie_weights()
