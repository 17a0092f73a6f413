"""The run's resumable state: what a checkpoint's ``state.json`` holds beside the weights, the run's
result so far (:class:`RunResult`, also what a finished run returns), and the checks that make
``--resume`` continue the same run.

Contract: :func:`run_state` is the JSON-ready dict written with every checkpoint (keys in a fixed
order; ``skill`` only when measured); a resume reads it back with
:func:`sparring.train.checkpoint.load_state`. :func:`check_same_config` refuses a resume whose
config would learn something else (where sandboxes run may differ); :func:`interrupted_after` is
the time after which a stopped run's stored rollouts are redone, so the store counts them once.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError
from sparring.train.config import RLConfig
from sparring.trajectory import Trajectory


@dataclass
class RunResult:
    """What a run returns, and (``to_json``) the record the store keeps and ``sparring train --json`` prints."""

    iterations: list[dict[str, Any]] = field(default_factory=list)
    heldout: dict[str, float] = field(default_factory=dict)
    sft: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    run_id: str = ""
    store: str = ""
    model: str = ""  # the base the run started from
    trained_model: str | None = None  # the newest checkpoint's weights (None: none was written)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    weight_syncs: int = 0  # pushes of weights to the configured inference server (this process)
    # per held-out phase, the look-before-acting measure (sparring.monitor.skill) of families that teach it
    skill: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # with eval_every: the held-out pass rate against the tool calls sampled for training so far
    heldout_curve: list[dict[str, Any]] = field(default_factory=list)
    # what the admission gate let through: tasks used, tasks skipped (with why), whether it was overridden
    admission: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        skill = {"skill": self.skill} if self.skill else {}  # only families with a skill measure have the key
        curve = {"heldout_curve": self.heldout_curve} if self.heldout_curve else {}  # only with eval_every
        return {
            "run_id": self.run_id,
            "iterations": self.iterations,
            "heldout": self.heldout,
            "sft": self.sft,
            "seconds": round(self.seconds, 3),
            "store": self.store,
            "model": self.model,
            "trained_model": self.trained_model,
            "alerts": self.alerts,
            "weight_syncs": self.weight_syncs,
            "admission": self.admission,
            **skill,
            **curve,
        }


def learning_config(dump: Any) -> Any:
    """A config dump without the settings that do not change what is learned (where sandboxes run),
    read through :class:`RLConfig` so that a setting added since the checkpoint was written compares at
    its default (a checkpoint from before ``model.max_batch`` existed still resumes)."""
    from pydantic import ValidationError

    if not isinstance(dump, dict):
        return dump
    with contextlib.suppress(ValidationError):
        dump = RLConfig.model_validate(dump).model_dump(mode="json")
    where = ("backend", "executor", "ray_address")
    return {k: v for k, v in dump.items() if k not in where}


def check_same_config(saved: dict[str, Any], cfg: RLConfig, ckpt: Path) -> None:
    """Raise :class:`ConfigError` unless ``cfg`` learns what the checkpoint's run learned. Where
    sandboxes run (backend) does not count: a run may resume on another backend, and checkpoints
    written before the setting existed still resume."""
    if learning_config(saved.get("config")) != learning_config(cfg.model_dump(mode="json")):
        raise ConfigError(
            f"--resume: the config differs from the one {ckpt} was written with; resume with the same config"
        )


def interrupted_after(saved: dict[str, Any], ckpt: Path) -> float:
    """When the checkpoint was written: rollouts stored later belong to iterations that are redone."""
    return float(saved.get("saved_at") or (ckpt / "state.json").stat().st_mtime)


def run_state(
    cfg: RLConfig,
    run_id: str,
    iteration: int,
    model_dir: Path,
    *,
    policy_version: int,
    curriculum: dict[str, Any],
    drift: dict[str, Any],
    alerts: dict[str, Any],
    pending: list[list[Trajectory]],
    iterations: list[dict[str, Any]],
    heldout: dict[str, float],
    sft: dict[str, Any],
    alerts_raised: list[dict[str, Any]],
    skill: dict[str, Any],
    heldout_curve: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The state written with the checkpoint of ``iteration``: the ``state_dict()`` of the
    curriculum, drift monitor and alert rules, the sampled batches still waiting for their update
    (``pending``) and the run's result so far (``skill`` and ``heldout_curve`` only when measured)."""
    return {
        "config": cfg.model_dump(mode="json"), "run_id": run_id, "iteration": iteration, "model": str(model_dir),
        "policy_version": policy_version, "curriculum": curriculum, "drift": drift,
        "alerts": alerts, "pending": [[t.model_dump(mode="json") for t in b] for b in pending],
        "iterations": iterations, "heldout": heldout, "sft": sft, "alerts_raised": alerts_raised,
        "saved_at": time.time(),
        **({"skill": skill} if skill else {}),
        **({"heldout_curve": heldout_curve} if heldout_curve else {}),
    }  # fmt: skip
