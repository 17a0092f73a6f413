"""The typed configuration of an RL run (``sparring train --config`` and ``sparring demo``).

Loadable from YAML or TOML; any field can be overridden on the command line as
``--set grpo.lr=1e-3`` (dotted path = value parsed as YAML).
"""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sparring.errors import ConfigError
from sparring.sandbox.config import BackendConfig, LocalBackendConfig
from sparring.train.grpo import GRPOConfig
from sparring.train.lora import LoRASettings


class ModelConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: Path | None = Field(
        None,
        description="An existing hf model dir, or a .gguf file (converted once, cached); None builds a tiny "
        "model in the workdir.",
    )
    hidden: int = Field(64, description="Hidden size of the tiny model.")
    layers: int = Field(2, description="Transformer layers of the tiny model.")
    heads: int = Field(4, description="Attention heads of the tiny model.")
    vocab_size: int = Field(2048, description="Tokenizer vocabulary size.")
    copy_pretrain_steps: int = Field(
        0,
        ge=0,
        description="Batches of generic copy exercises the tiny model is pretrained on before the warm start "
        "(sparring.train.pretrain; 0: none, the weights stay random).",
    )
    max_new_tokens: int = Field(64, description="Tokens the policy may generate per turn.")
    max_prompt_tokens: int = Field(
        1536,
        description="Prompt tokens kept: whole middle turns are dropped first, oldest first; the system "
        "prompt, the instruction, the tool schemas and the last turn are always kept.",
    )
    temperature: float = Field(1.0, description="Sampling temperature of rollouts.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling mass of rollouts.")
    tool_format: str | None = Field(
        None,
        description="Tool-call format of the model's chat template (sparring, hermes, qwen3_coder, "
        "llama3_json); None detects it from the template (the CLI's hf:PATH#FORMAT).",
    )
    turn_timeout_s: float | None = Field(
        None,
        gt=0,
        description="Seconds one policy turn may take (None: 600); the tasks' wall clock bounds the commands only.",
    )
    max_batch: int = Field(
        64,
        ge=1,
        description="Turns sampled in one generate call. Each turn samples from its own random stream "
        "(run seed, task, sample, turn), so batching never changes the tokens a seed gives.",
    )
    lora: LoRASettings | None = Field(
        None,
        description="Train LoRA adapters in the RL stage instead of all weights (the warm start stays full).",
    )


class WeightSyncConfig(BaseModel):
    """Push the trained weights to an inference server after every update (sparring.train.weight_sync)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(..., description="The server's base URL (SGLang, `sparring serve-policy`, or vLLM).")
    kind: Literal["sglang", "vllm-lora"] = Field(
        "sglang",
        description="sglang: update_weights_from_disk; vllm-lora: load_lora_adapter (needs model.lora).",
    )
    directory: Path | None = Field(
        None, description="Where pushed weights are written (the server must read it); default WORKDIR/sync."
    )
    lora_name: str = Field("sparring", description="vllm-lora: the adapter name rollouts ask for.")


class WarmStartConfig(BaseModel):
    """SFT warm start: behaviour cloning of a scripted teacher's stored trajectories."""

    model_config = ConfigDict(extra="forbid")

    teacher: Literal["oracle", "noisy"] = Field(
        "oracle",
        description="oracle: the reference solution through the tools; noisy: the family's demonstrator "
        "with systematic mistakes (shell-ops, shell-look), so the warm-started model has a partial pass rate.",
    )
    epsilon: float = Field(
        0.5, ge=0, le=1, description="noisy teacher: probability it runs the confusable partner operation."
    )
    forget_output: float = Field(
        0.0,
        ge=0,
        le=1,
        description="noisy teacher: probability it prints the result instead of writing out.txt.",
    )
    guess: float = Field(
        0.0,
        ge=0,
        le=1,
        description="noisy teacher (shell-look): probability it acts on a guessed file name without looking.",
    )
    samples: int = Field(1, ge=1, description="Teacher rollouts per training task.")
    passed_only: bool = Field(True, description="Train only on teacher trajectories the judge passed.")


class CurriculumConfig(BaseModel):
    """The Beta curriculum (sparring.curriculum.sampler)."""

    model_config = ConfigDict(extra="forbid")

    solved: float = Field(
        0.95, gt=0, le=1, description="Park a task whose posterior mean pass rate reaches this."
    )
    impossible: float = Field(0.05, ge=0, lt=1, description="Park a task whose posterior mean falls to this.")
    min_obs: int = Field(8, ge=1, description="Observations before a task may be parked.")
    retest_p: float = Field(0.05, ge=0, le=1, description="Chance per draw that a parked task is re-tested.")
    decay: float = Field(1.0, gt=0, le=1, description="Discount of old evidence per update (1: none).")
    balance: bool = Field(True, description="Deal batch slots round-robin over (family, tier) strata.")


class MonitorConfig(BaseModel):
    """Exporters and drift detection."""

    model_config = ConfigDict(extra="forbid")

    exporters: list[str] = Field(
        default_factory=lambda: ["tensorboard"],
        description="tensorboard, wandb, mlflow (JSONL is always written).",
    )
    drift_reference: int = Field(128, ge=8, description="Rewards per key in the drift reference window.")
    drift_window: int = Field(128, ge=8, description="Rewards per key in the current (sliding) window.")


class RLConfig(BaseModel):
    """The whole training run: tasks, model, rollouts, judge, loss and schedule (YAML/TOML, `--set` overrides)."""

    model_config = ConfigDict(extra="forbid")

    workdir: Path = Field(Path(".sparring/run"), description="Where tasks, model, store and metrics go.")
    family: str | None = Field(
        "code-repair",
        description="Task family to generate (null: none; with `tasks` set and no family given, only those "
        "tasks are used).",
    )
    n_train: int = Field(16, ge=1, description="Training tasks generated.")
    n_heldout: int = Field(6, ge=1, description="Held-out tasks, never trained on.")
    tasks: Path | None = Field(
        None,
        description="A task directory or a directory of task directories to train on (your own tasks), alone "
        "or beside a generated `family`. Admitted before use.",
    )
    heldout_tasks: Path | None = Field(
        None,
        description="Task directories for the held-out evaluation (beside the family's held-out tasks). Without "
        "them and without a family, the held-out evaluation runs the training tasks.",
    )
    allow_unadmitted: bool = Field(
        False,
        description="Use tasks admission rejected (by default a generated family's rejects are skipped with a "
        "logged reason, and a rejected task of `tasks` / `heldout_tasks` stops the run).",
    )
    admission_repeats: int = Field(
        0,
        ge=0,
        description="Reference runs when admitting tasks not yet checked (0: as `sparring tasks check`).",
    )
    seed: int = Field(0, description="Seed of task generation, model init and sampling.")
    model: ModelConfig = Field(default_factory=ModelConfig)
    sft_steps: int = Field(8, ge=0, description="Warm-start SFT steps on oracle trajectories (0 = none).")
    sft_batch: int = Field(4, ge=1, description="Examples (assistant turns) per SFT step.")
    sft_lr: float = Field(3e-3, gt=0, description="Learning rate of the SFT warm start.")
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig)
    rl: bool = Field(True, description="Run GRPO updates (False: the control run).")
    iterations: int = Field(3, ge=0, description="RL iterations.")
    tasks_per_iteration: int = Field(4, ge=1, description="Tasks sampled per iteration by the curriculum.")
    group_size: int = Field(4, ge=2, description="Rollouts per task (one GRPO group).")
    max_steps: int = Field(6, ge=1, description="Tool calls per rollout.")
    concurrency: int = Field(2, ge=1, description="Rollouts in flight at once.")
    heldout_max_steps: int = Field(6, ge=1, description="Tool calls per held-out rollout.")
    heldout_samples: int = Field(1, ge=1, description="Rollouts per held-out task (pass rate averages them).")
    eval_every: int = Field(
        0,
        ge=0,
        description="Also evaluate the held-out tasks every N RL iterations (0: only before and after RL); "
        "the result's heldout_curve pairs each pass rate with the tool calls sampled so far.",
    )
    sandbox_limits: bool = Field(True, description="Apply the tasks' memory/pids limits (needs cgroups).")
    backend: BackendConfig = Field(
        default_factory=LocalBackendConfig,
        description="Sandbox backend of rollouts and the judge: {kind: local} (default) or {kind: oci, image: ...}.",
    )
    async_rollouts: bool = Field(
        True,
        description="With grpo.staleness k >= 1, sample the next batch while the trainer updates (k = 0 "
        "is synchronous: sample, then update).",
    )
    executor: Literal["local", "ray"] = Field(
        "local", description="Where rollouts run: local (this process) or ray (node actors on a Ray cluster)."
    )
    ray_address: str | None = Field(
        None, description="executor=ray: the cluster (HOST:PORT); None starts one on this machine."
    )
    resample_rounds: int = Field(
        1, ge=0, description="Rounds of replacing zero-variance groups by fresh tasks per iteration."
    )
    checkpoint_every: int = Field(1, ge=0, description="Checkpoint every N iterations (0: never).")
    credit: Literal["flat", "tree"] = Field(
        "flat",
        description="Credit assignment: flat (GRPO: one advantage per episode) or tree (per turn, from "
        "rollouts forked at branch_at; sparring.train.tree_credit). Sets grpo.credit.",
    )
    branch_at: str | None = Field(
        None,
        description="credit=tree: fork each training rollout after these turns: 1,2 | first:N | entropy:N | all.",
    )
    branches: int = Field(0, ge=0, description="credit=tree: branches forked at each branch_at turn (K).")

    @field_validator("branch_at", mode="before")
    @classmethod
    def _turns_as_text(cls, v: Any) -> Any:
        """YAML reads ``branch_at: 1`` as a number and ``[1, 2]`` as a list: both mean turns."""
        if isinstance(v, int) and not isinstance(v, bool):
            return str(v)
        if isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
            return ",".join(map(str, v))
        return v

    grpo: GRPOConfig = Field(default_factory=GRPOConfig)
    curriculum: CurriculumConfig = Field(default_factory=CurriculumConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    weight_sync: WeightSyncConfig | None = Field(
        None, description="Push weights to an inference server after every GRPO update (None: off)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> RLConfig:
        """Impossible combinations fail here, before any task, model or sandbox is made."""
        if self.credit == "tree":
            if not self.branch_at or self.branches < 1:
                raise ValueError(
                    "credit=tree needs branch_at (1,2 | first:N | entropy:N | all) and branches >= 1"
                )
            from sparring.rollout.branching import parse_branch_plan

            try:
                parse_branch_plan(self.branch_at, self.branches)
            except ConfigError as e:
                raise ValueError(
                    str(e).replace("--branch-at", "branch_at").replace("--branches", "branches")
                ) from None
            if self.executor != "local":
                raise ValueError("credit=tree forks sandboxes in the training process: use executor=local")
        elif self.branch_at or self.branches:
            raise ValueError("branch_at/branches fork rollouts for credit=tree only: set credit: tree")
        if self.grpo.credit != self.credit:
            self.grpo = self.grpo.model_copy(update={"credit": self.credit})
        from sparring.tasks.families import FAMILIES

        if self.family is not None and self.family not in FAMILIES:
            close = difflib.get_close_matches(self.family, list(FAMILIES), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ValueError(f"unknown family {self.family!r} ({hint}known: {', '.join(sorted(FAMILIES))})")
        if self.weight_sync is not None and self.weight_sync.kind == "vllm-lora" and self.model.lora is None:
            raise ValueError("weight_sync.kind=vllm-lora pushes a LoRA adapter: set model.lora too")
        if self.tasks is not None and "family" not in self.model_fields_set:
            self.family = None  # your tasks alone, unless a family is named beside them
        if self.family is None and self.tasks is None:
            raise ValueError(
                "no training tasks: set family (a generator) or tasks (a directory of task dirs)"
            )
        for name in ("tasks", "heldout_tasks"):
            where = getattr(self, name)
            if where is not None and not where.exists():
                raise ValueError(f"{name}: {where} does not exist (a task directory or a directory of tasks)")
        if self.tasks_per_iteration > self.n_train and self.tasks is None:
            raise ValueError(
                f"tasks_per_iteration={self.tasks_per_iteration} exceeds n_train={self.n_train}: "
                "a batch cannot hold more distinct tasks than the pool"
            )
        if self.grpo.minibatches > self.tasks_per_iteration * self.group_size:
            raise ValueError(
                f"grpo.minibatches={self.grpo.minibatches} exceeds the {self.tasks_per_iteration * self.group_size} "
                "rollouts of a batch (tasks_per_iteration x group_size)"
            )
        if self.grpo.staleness >= max(self.iterations, 1) and self.rl and self.iterations:
            raise ValueError(
                f"grpo.staleness={self.grpo.staleness} >= iterations={self.iterations}: no update would run"
            )
        gguf = self.model.path is not None and self.model.path.suffix == ".gguf" and self.model.path.is_file()
        if self.model.path is not None and not gguf and not (self.model.path / "config.json").is_file():
            raise ValueError(
                f"model.path {self.model.path} is not a model directory (no config.json there) nor a .gguf file"
            )
        if self.model.path is None and self.model.hidden % self.model.heads:
            raise ValueError(
                f"model.hidden={self.model.hidden} is not a multiple of model.heads={self.model.heads}"
            )
        for name in self.monitor.exporters:
            if name not in ("tensorboard", "wandb", "mlflow"):
                raise ValueError(
                    f"monitor.exporters: unknown exporter {name!r} (choose tensorboard, wandb, mlflow)"
                )
        return self


def _set_dotted(d: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    cur = d
    for p in parts[:-1]:
        cur = cur.setdefault(p, {})
        if not isinstance(cur, dict):
            raise ConfigError(f"cannot set {key}: {p} is not a section")
    cur[parts[-1]] = value


def load_config(
    path: Path | None, overrides: list[str] | None = None, base: dict[str, Any] | None = None
) -> RLConfig:
    """The config in ``path`` (YAML or TOML) over ``base``, with ``key=value`` ``overrides`` applied, validated."""
    data: dict[str, Any] = dict(base or {})
    if path is not None:
        if not path.is_file():
            raise ConfigError(f"config file not found: {path}")
        text = path.read_text()
        try:
            loaded = tomllib.loads(text) if path.suffix == ".toml" else yaml.safe_load(text)
        except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
            raise ConfigError(f"malformed config {path}: {_parse_error(e)}") from None
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
        msg = str(first["msg"]).removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":
            allowed = _allowed(first["loc"])
            close = difflib.get_close_matches(str(first["loc"][-1]), allowed, n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}? " if close else ""
            msg = f"unknown key ({hint}allowed here: {', '.join(allowed) or 'see the config reference'})"
        raise ConfigError(f"invalid config: {loc + ': ' if loc else ''}{msg}") from None


def _parse_error(e: Exception) -> str:
    """A YAML or TOML syntax error in one line, with where it is (line and column, 1-based)."""
    mark = getattr(e, "problem_mark", None)
    if isinstance(e, yaml.YAMLError) and mark is not None:
        what = getattr(e, "problem", None) or str(e).splitlines()[0]
        return f"line {mark.line + 1}, column {mark.column + 1}: {what}"
    return str(e).splitlines()[0]


def _allowed(loc: tuple[Any, ...]) -> list[str]:
    """The field names of the section an unknown key was found in (empty: not known here)."""
    model: Any = RLConfig
    for part in loc[:-1]:
        field = model.model_fields.get(str(part)) if hasattr(model, "model_fields") else None
        if field is None or not hasattr(field.annotation, "model_fields"):
            return []
        model = field.annotation
    return sorted(model.model_fields)
