"""The task specification: the typed form of ``task.toml``.

A task is a directory (every key and file: docs/tasks.md)::

    task.toml    this spec
    workspace/   the initial state the agent sees (read-only lower layer)
    hidden/      judge-only assets (hidden tests); never in the agent's sandbox
    solution/    reference solution: whole files overlaying workspace/
                 (paths listed in solution/.deleted are removed)

A task may declare its own tools (``[[custom_tools]]``): an OpenAI function
schema plus the command of a small tool server the task ships in its
workspace, run in the agent's sandbox for each call (see
:mod:`sparring.env.tools`). A declaration that breaks a rule is a spec error
naming it (``tasks check`` reports it under ``spec_valid``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from sparring.sandbox.base import check_workspace_alias

SCHEMA_VERSION = 1
DEFAULT_CPUS = 1.0
"""A task sandbox's CPU bound when task.toml sets none: one core, whatever the host. A fixed share, not
cores / concurrency, so a task's behaviour (its timeouts) does not depend on the machine or on how many
rollouts run beside it, and no rollout can take the cores its neighbours need."""
BUILTIN_TOOLS: tuple[str, ...] = (
    "bash",
    "read_file",
    "write_file",
    "str_replace",
    "list_dir",
    "run_tests",
    "submit",
)
"""The tools every sandbox can run (their schemas: :data:`sparring.env.tools.TOOL_SCHEMAS`)."""
JSON_TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Limits(_Strict):
    """Resource and budget limits for one rollout of the task."""

    max_steps: int = Field(16, ge=1, le=1000, description="Most tool calls in one rollout.")
    wall_s: float = Field(300.0, gt=0, description="Wall-clock budget of a whole rollout, seconds.")
    exec_timeout_s: float = Field(30.0, gt=0, description="Default timeout of one command.")
    memory_mb: int = Field(1024, ge=32, description="Memory limit of the sandbox (SandboxSpec's bound).")
    pids: int = Field(256, ge=8, description="Most processes alive in the sandbox.")
    cpus: float = Field(
        DEFAULT_CPUS,
        gt=0,
        le=64,
        description="CPU bound of the sandbox in cores (cgroup quota; SandboxSpec's cpus); 0.5 is half a core.",
    )
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
        "binary_module (sparring.judge.static.importable).",
    )


class Environment(_Strict):
    """The pinned execution environment the task runs in."""

    python: str = Field("3.11", description="Python version of the environment layer.")
    requirements: list[str] = Field(default_factory=lambda: ["pytest"], description="Pinned requirements.")
    image: str | None = Field(
        None,
        description="OCI image the task's sandboxes run, pinned as REF@sha256:... (`sparring tasks pin` pins a "
        "tag). The local backend runs it from the image store (its own Python judges); the OCI backend "
        "mounts the Python layer into it.",
    )
    workspace: str | None = Field(
        None,
        description="Where the image keeps the task's repository (e.g. /testbed in a SWE-bench image): the task's "
        "workspace was read from there when it was imported, and the sandbox mounts the same live workspace at "
        "this path too (one mount, two paths: SandboxSpec.workspace_alias), so what the image installed from "
        "there (an editable install, a console script) runs the agent's edits, for the agent and the judge "
        "alike. Commands still start in /workspace. Not a system directory (/usr, /etc, /lib*, /tmp, ...).",
    )

    @field_validator("workspace")
    @classmethod
    def _workspace_path(cls, v: str | None) -> str | None:
        return None if v is None else check_workspace_alias(v)


class CustomTool(_Strict):
    """A tool the task declares: its OpenAI function schema and the tool server that runs it.

    Each call runs ``command`` in the agent's sandbox (cwd /workspace) with the tool's name as its
    last argument and the call's arguments, a JSON object, on stdin; stdout and stderr are the
    observation. The server lives in the task's workspace, so the task's digest covers it.
    """

    name: str = Field(..., description="Function name the model calls.")
    description: str = Field(..., description="What the tool does, shown to the model.")
    parameters: dict[str, Any] = Field(
        default_factory=lambda: {"type": "object", "properties": {}},
        description="JSON schema of the arguments: an object with typed properties.",
    )
    command: str = Field(..., description="Shell command of the tool server, e.g. `python .tools/server.py`.")

    @model_validator(mode="after")
    def _rules(self) -> CustomTool:
        rule = "custom_tool_declaration"
        if not re.fullmatch(r"[a-z][a-z0-9_]{0,63}", self.name):
            raise ValueError(
                f"{rule}: tool name {self.name!r} must be lower_snake_case (a-z, 0-9, _), at most 64 chars"
            )
        if self.name in BUILTIN_TOOLS:
            raise ValueError(f"{rule}: tool {self.name!r} shadows a built-in tool; choose another name")
        if not self.description.strip():
            raise ValueError(f"{rule}: tool {self.name!r} needs a description the model can act on")
        if not self.command.strip():
            raise ValueError(f"{rule}: tool {self.name!r} needs the command of its tool server")
        p = self.parameters
        if p.get("type") != "object" or not isinstance(p.get("properties", {}), dict):
            raise ValueError(
                f"{rule}: tool {self.name!r}: parameters must be a JSON schema of type object with properties"
            )
        props: dict[str, Any] = p.get("properties", {})
        for key, sub in props.items():
            if not isinstance(sub, dict) or sub.get("type") not in JSON_TYPES:
                raise ValueError(
                    f"{rule}: tool {self.name!r}: parameter {key!r} needs a JSON type ({', '.join(sorted(JSON_TYPES))})"
                )
        required = p.get("required", [])
        if not isinstance(required, list) or not set(required) <= set(props):
            raise ValueError(f"{rule}: tool {self.name!r}: required must list declared parameters only")
        return self

    def function_schema(self) -> dict[str, Any]:
        """The OpenAI function schema offered to the model."""
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": dict(self.parameters)}}  # fmt: skip


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
        default_factory=lambda: list(BUILTIN_TOOLS),
        description="Tools offered to the agent: built-in ones and those declared in custom_tools.",
    )
    custom_tools: list[CustomTool] = Field(
        default_factory=list,
        description="Tools the task declares (offered when listed in `tools`), run by its own tool server.",
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
        description="Pinned digest of workspace/ (sparring.sandbox.storage.layers.tree_digest), written by write_task; "
        "admission rebuilds the initial state and rejects the task if it differs (a tampered workspace).",
    )

    @field_validator("tools")
    @classmethod
    def _known_tools(cls, v: list[str]) -> list[str]:
        if "submit" not in v:
            raise ValueError("tools must include 'submit' so a rollout can end")
        return v

    @model_validator(mode="after")
    def _declared_tools(self) -> TaskSpec:
        names = [t.name for t in self.custom_tools]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"custom_tool_declaration: tool(s) declared twice: {', '.join(dup)}")
        unknown = [n for n in self.tools if n not in BUILTIN_TOOLS and n not in names]
        if unknown and self.custom_tools:
            raise ValueError(
                f"custom_tool_declaration: tools lists {', '.join(unknown)}, neither built-in nor declared in custom_tools"
            )
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: Any, info: SerializationInfo) -> dict[str, Any]:
        # A task without custom tools serialises (and so digests) exactly as before they existed.
        d: dict[str, Any] = handler(self)
        if not self.custom_tools:
            d.pop("custom_tools", None)
        return d


# Fields added after schema 1 enter a spec's canonical form only when they differ from their default, so
# every task written before them keeps its digest and its task.toml bytes.
LATE_DEFAULTS: tuple[tuple[str, str], ...] = (
    ("limits", "cpus"),
    ("judge", "allow_binary_modules"),
    ("environment", "image"),
    ("environment", "workspace"),
)
"""(section, field) added to task.toml after schema 1: omitted from the canonical form at their default."""


def canonical_dump(spec: TaskSpec, exclude_none: bool = False) -> dict[str, Any]:
    """The spec as JSON-able data for its digest and task.toml: later fields at their default left out."""
    out = spec.model_dump(mode="json", exclude_none=exclude_none)
    for section, name in LATE_DEFAULTS:
        part = out.get(section)
        default = type(getattr(spec, section)).model_fields[name].get_default(call_default_factory=True)
        if isinstance(part, dict) and part.get(name, default) == default:
            part.pop(name, None)
    return out
