"""The typed configuration of an RL run (``sparring train --config`` and ``sparring demo``).

Loadable from YAML or TOML; any field can be overridden on the command line as
``--set grpo.lr=1e-3`` (dotted path = value parsed as YAML).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sparring.errors import ConfigError
from sparring.train.grpo import GRPOConfig


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: Path | None = Field(None, description="An existing hf model dir; None builds a tiny model in the workdir.")
    hidden: int = Field(64, description="Hidden size of the tiny model.")
    layers: int = Field(2, description="Transformer layers of the tiny model.")
    heads: int = Field(4, description="Attention heads of the tiny model.")
    vocab_size: int = Field(2048, description="Tokenizer vocabulary size.")
    max_new_tokens: int = Field(64, description="Tokens the policy may generate per turn.")
    max_prompt_tokens: int = Field(1536, description="Prompt tokens kept (oldest turns dropped first).")
    temperature: float = Field(1.0, description="Sampling temperature of rollouts.")


class RLConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    workdir: Path = Field(Path(".sparring/run"), description="Where tasks, model, store and metrics go.")
    family: str = Field("code-repair", description="Task family to generate.")
    n_train: int = Field(16, ge=1, description="Training tasks generated.")
    n_heldout: int = Field(6, ge=1, description="Held-out tasks, never trained on.")
    seed: int = Field(0, description="Seed of task generation, model init and sampling.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    sft_steps: int = Field(8, ge=0, description="Warm-start SFT steps on oracle trajectories (0 = none).")
    sft_batch: int = Field(4, ge=1, description="Examples (assistant turns) per SFT step.")
    sft_lr: float = Field(3e-3, gt=0, description="Learning rate of the SFT warm start.")
    rl: bool = Field(True, description="Run GRPO updates (False: the control run).")
    iterations: int = Field(3, ge=0, description="RL iterations.")
    tasks_per_iteration: int = Field(4, ge=1, description="Tasks sampled per iteration by the curriculum.")
    group_size: int = Field(4, ge=2, description="Rollouts per task (one GRPO group).")
    max_steps: int = Field(6, ge=1, description="Tool calls per rollout.")
    concurrency: int = Field(2, ge=1, description="Rollouts in flight at once.")
    heldout_max_steps: int = Field(6, ge=1, description="Tool calls per held-out rollout.")
    sandbox_limits: bool = Field(True, description="Apply the tasks' memory/pids limits (needs cgroups).")
    grpo: GRPOConfig = Field(default_factory=GRPOConfig)


def _set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    cur = d
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
        if not isinstance(cur, dict):
            raise ConfigError(f"cannot set {key}: {p} is not a section")
    cur[parts[-1]] = value


def load_config(path: Path | None, overrides: list[str] | None = None, base: dict[str, Any] | None = None) -> RLConfig:
    data: dict[str, Any] = dict(base or {})
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        text = path.read_text()
        try:
            loaded = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
        except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
            raise ConfigError(f"malformed config {path}: {str(e).splitlines()[0]}") from None
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"config {path} must be a mapping at the top level")
        data.update(loaded or {})
    for ov in overrides or []:
        key, sep, raw = ov.partition("=")
        if not sep or not key:
            raise ConfigError(f"bad override {ov!r}: write key.path=value")
        _set_dotted(data, key.strip(), yaml.safe_load(raw))
    try:
        return RLConfig.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise ConfigError(f"invalid config: {loc}: {first['msg']}") from None
