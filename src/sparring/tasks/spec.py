"""The task specification: the typed form of ``task.toml``.

A task is a directory (DESIGN.md §2)::

    task.toml    this spec
    workspace/   the initial state the agent sees (read-only lower layer)
    hidden/      judge-only assets (hidden tests); never in the agent's sandbox
    solution/    reference solution: whole files overlaying workspace/
                 (paths listed in solution/.deleted are removed)
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

SCHEMA_VERSION = 1
LATE_DEFAULTS: tuple[tuple[str, str], ...] = (("judge", "allow_binary_modules"),)
"""(section, field) added to task.toml after schema 1: omitted from the canonical form at their default."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Strict):
    """Resource and budget limits for one rollout of the task."""

    max_steps: int = Field(16, ge=1, le=1000, description="Most tool calls in one rollout.")
    wall_s: float = Field(300.0, gt=0, description="Wall-clock budget of a whole rollout, seconds.")
    exec_timeout_s: float = Field(30.0, gt=0, description="Default timeout of one command.")
    memory_mb: int = Field(1024, ge=32, description="Memory limit of the sandbox (SandboxSpec's bound).")
    pids: int = Field(256, ge=8, description="Most processes alive in the sandbox.")
    disk_mb: int = Field(256, ge=1, description="Most bytes the agent may write.")
    network: Literal["none", "loopback"] = Field("none", description="Network of the sandbox.")


class JudgeSpec(_Strict):
    """How the task is scored."""

    kind: Literal["pytest"] = Field("pytest", description="Judge kind; a family shares one.")
    version: str = Field("pytest-judge/1", description="Judge version pin this task was admitted with.")
    weights: dict[str, float] = Field(
        default_factory=lambda: {"all_pass": 1.0},
        description="Weights of named reward components; reward = sum(w * component).",
    )
    hidden_tests: list[str] = Field(
        default_factory=list,
        description="Every hidden test id that must run (pytest node ids relative to hidden/).",
    )
    timeout_s: float = Field(60.0, gt=0, description="Timeout of the judge's test run.")
    allow_binary_modules: list[str] = Field(
        default_factory=list,
        description="Globs (whole workspace paths, fnmatch) of non-source importables the agent may add: "
        "extension modules, bytecode, archives. Others in the diff are removed before judging and flagged "
        "binary_module (sparring.judge.importable).",
    )


class Environment(_Strict):
    """The pinned execution environment the task runs in."""

    python: str = Field("3.11", description="Python version of the environment layer.")
    requirements: list[str] = Field(default_factory=lambda: ["pytest"], description="Pinned requirements.")


class Provenance(_Strict):
    generator: str = Field("", description="Family generator (name/version) or importer.")
    seed: int | None = Field(None, description="Seed the generator used.")
    source: str = Field("", description="Where the task's content came from.")


class TaskSpec(_Strict):
    """The contents of ``task.toml``."""

    schema_version: int = Field(SCHEMA_VERSION, description="task.toml schema version.")
    id: str = Field(..., min_length=1, max_length=200, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    version: int = Field(1, ge=1)
    family: str = Field(..., min_length=1)
    instruction: str = Field(
        "", description="What the agent must do; admission rejects a missing or vague one."
    )
    success_criteria: str = Field(
        "",
        description="How success is judged; admission rejects a missing or vague one (rule success_criteria_specific).",
    )
    tools: list[str] = Field(
        default_factory=lambda: [
            "bash",
            "read_file",
            "write_file",
            "str_replace",
            "list_dir",
            "run_tests",
            "submit",
        ]
    )
    limits: Limits = Field(default_factory=Limits)
    judge: JudgeSpec = Field(default_factory=JudgeSpec)
    difficulty: int = Field(
        1,
        ge=0,
        le=10,
        description="Difficulty tier: from generator parameters, later from measured pass rates.",
    )
    tags: list[str] = Field(default_factory=list)
    provenance: Provenance = Field(default_factory=Provenance)
    environment: Environment = Field(default_factory=Environment)
    workspace_digest: str | None = Field(
        None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="Pinned digest of workspace/ (sparring.sandbox.layers.tree_digest), written by write_task; "
        "admission rebuilds the initial state and rejects the task if it differs (a tampered workspace).",
    )

    def canonical_dump(self) -> dict[str, Any]:
        """The spec as JSON data, without fields that are at a default added after schema 1.

        Digests and written task.toml files use this form, so adding such a field never changes the
        digest of a task that does not use it (see :data:`LATE_DEFAULTS`).
        """
        data = self.model_dump(mode="json")
        for section, name in LATE_DEFAULTS:
            part = data.get(section)
            default = type(getattr(self, section)).model_fields[name].get_default(call_default_factory=True)
            if isinstance(part, dict) and part.get(name) == default:
                del part[name]
        return data

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, v: list[str]) -> list[str]:
        if "submit" not in v:
            raise ValueError("tools must include 'submit' so a rollout can end")
        return v
