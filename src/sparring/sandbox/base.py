"""The Sandbox protocol and its records.

A sandbox is an isolated, resource-limited place to run an agent's commands
over a copy-on-write view of a task's workspace. Limits reached (timeout, OOM)
are *results* in :class:`ExecResult`; only infrastructure faults raise
:class:`~sparring.errors.SandboxError`.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

WORKSPACE = "/workspace"
OUTPUT_CAP = 1 << 20
"""Bytes kept per stream of one command (every backend); the rest is counted and dropped."""
TRUNC_MARKER = "\n[... output truncated by sparring: {n} more bytes ...]\n"
"""Appended to a command's output where its cap dropped bytes (every backend says it the same way)."""
RESERVED_PATHS = (
    "/usr", "/bin", "/sbin", "/etc", "/proc", "/sys", "/dev", "/boot", "/tmp", "/workspace", "/.sparring",
    "/judge", "/run/sparring", "/home/agent",
)  # fmt: skip
"""Paths a workspace alias may not be, be under or contain: the image's system, the sandbox's own mount
points, /workspace itself. Every top-level ``lib*`` directory is refused too."""


def check_workspace_alias(path: str) -> str:
    """``path`` (trailing '/' dropped) when it may hold a second view of the workspace, else ValueError.

    It must be absolute and normal (no '..', '.', '//'), not '/', and apart from the directories a sandbox
    needs as they are (:data:`RESERVED_PATHS`, ``/lib*``): a workspace bound there would shadow them."""
    p = path.rstrip("/") or "/"
    if not p.startswith("/") or posixpath.normpath(p) != p or p.startswith("//"):
        raise ValueError(f"workspace path {path!r} must be an absolute, normal path (no '..', '.' or '//')")
    hit = next((r for r in RESERVED_PATHS if p == r or p.startswith(r + "/") or r.startswith(p + "/")), None)
    if p == "/" or hit is not None or p.split("/")[1].startswith("lib"):
        raise ValueError(
            f"workspace path {path!r} would shadow {hit or p} in the sandbox: name a directory of the image's "
            "own, such as /testbed or /app (not /, /usr, /etc, /bin, /lib*, /tmp, /workspace, ...)"
        )
    return p


class EnvironmentRef(BaseModel):
    """A built, read-only Python environment layer (a virtual environment) a sandbox runs in.

    It is part of the spec, so the agent's sandbox and the judge's, made from the same task, run the
    same interpreter and packages, and sandboxes of different layers never share a pool slot.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    digest: str = Field(
        ...,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="Content digest of the layer (its pins and Python).",
    )
    path: Path = Field(
        ..., description="The layer's root on the host: a venv whose bin/python runs commands."
    )


class SandboxSpec(BaseModel):
    """What a sandbox is made from and what it may use."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    workspace: Path | None = Field(
        None, description="Read-only lower layer seen at /workspace (None: empty)."
    )
    workspace_alias: str | None = Field(
        None,
        description="A second path where the same live workspace is mounted (the task's [environment] "
        "workspace, e.g. /testbed in a SWE-bench image): what the image installed from there (an editable "
        "install's .pth file, a console script) runs the agent's edits. One mount seen at both paths, so "
        "reset, snapshot and restore cover both; commands still start in /workspace.",
    )
    workspace_digest: str | None = Field(
        None,
        pattern=r"^(sha256:)?[0-9a-f]{64}$",
        description="Pinned digest of the workspace (sparring.sandbox.storage.layers.tree_digest): verified once, then "
        "every sandbox mounts the verified copy.",
    )
    extra_ro: dict[str, Path] = Field(
        default_factory=dict, description="Extra read-only mounts: sandbox path -> host path (judge assets)."
    )
    extra_rw: dict[str, Path] = Field(
        default_factory=dict, description="Extra writable mounts: sandbox path -> host path (judge reports)."
    )
    network: Literal["none", "loopback", "allowlist"] = Field(
        "none",
        description="'none': an empty network namespace (not even loopback); 'loopback': the sandbox's own "
        "loopback only; 'allowlist': loopback plus an HTTP(S) proxy that reaches only allow_hosts.",
    )
    allow_hosts: tuple[str, ...] = Field(
        (), description="With network='allowlist': 'host' or 'host:port' entries the proxy lets through."
    )
    memory_mb: int | None = Field(
        None,
        ge=32,
        le=1 << 20,
        description="Memory limit in MiB (cgroup), exec server included; OOM is reported.",
    )
    pids: int | None = Field(None, ge=8, le=1 << 22, description="Most processes alive at once (cgroup).")
    cpus: float | None = Field(
        None, gt=0, le=4096, description="CPU bound in cores (cgroup quota): 0.5 is half a core."
    )
    disk_mb: int = Field(
        512,
        ge=1,
        le=1 << 20,
        description="Most MiB the sandbox may write: /workspace, /tmp and $HOME together.",
    )
    nofile: int = Field(1024, ge=16, le=1 << 20, description="Most open files per process (rlimit).")
    env: dict[str, str] = Field(default_factory=dict, description="Extra environment for every command.")
    seed: int = Field(0, description="PYTHONHASHSEED inside the sandbox.")
    environment: EnvironmentRef | None = Field(
        None,
        description="The Python layer the sandbox runs (`python` on its PATH); None: the host's, i.e. the "
        "interpreter running Sparring.",
    )
    image: str | None = Field(
        None,
        description="Container image the sandbox needs (the task's [environment] image): only a backend "
        "that runs images (OCI) can make it.",
    )

    @field_validator("workspace_alias")
    @classmethod
    def _alias_path(cls, v: str | None) -> str | None:
        return None if v is None else check_workspace_alias(v)

    @model_validator(mode="after")
    def _alias_apart_from_mounts(self) -> SandboxSpec:
        a = self.workspace_alias
        if a is None:
            return self
        for dest in (*self.extra_ro, *self.extra_rw):
            d = dest.rstrip("/")
            if d == a or d.startswith(a + "/") or a.startswith(d + "/"):
                raise ValueError(f"workspace_alias {a} overlaps the extra mount {dest}: keep them apart")
        return self

    @model_validator(mode="after")
    def _allowlist_needs_network_mode(self) -> SandboxSpec:
        if self.allow_hosts and self.network != "allowlist":
            raise ValueError("allow_hosts needs network='allowlist'")
        return self


@dataclass(frozen=True)
class ExecResult:
    """What a command did. ``exit_code`` is 124 on timeout, like coreutils' timeout."""

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    oom_killed: bool = False
    duration_ms: float = 0.0
    truncated: bool = False

    def to_json(self) -> dict[str, object]:
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "timed_out": self.timed_out,
            "oom_killed": self.oom_killed,
            "duration_ms": round(self.duration_ms, 3),
        }


@dataclass(frozen=True)
class WorkspaceDiff:
    """The agent's change to /workspace: whole files written and paths deleted.

    ``flags`` non-empty means the host refused to take the diff as it is
    (``workspace_too_large``: apparent sizes beyond the sandbox's disk quota;
    ``unrepresentable_path``: a name that is not UTF-8; ``workspace_unreadable``,
    ``workspace_changed``), ``detail`` says why: the diff is then incomplete
    and is scored 0 with those flags, never judged as if it were the agent's work.
    """

    files: dict[str, bytes] = field(default_factory=dict)
    deleted: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    detail: str = ""

    def is_empty(self) -> bool:
        return not self.files and not self.deleted and not self.flags

    def to_json(self) -> dict[str, object]:
        import base64

        enc: dict[str, dict[str, str]] = {}
        for k, v in sorted(self.files.items()):
            try:
                enc[k] = {"text": v.decode("utf-8")}
            except UnicodeDecodeError:
                enc[k] = {"b64": base64.b64encode(v).decode()}
        out: dict[str, object] = {"files": enc, "deleted": sorted(self.deleted)}
        if self.flags:
            out["flags"], out["detail"] = list(self.flags), self.detail
        return out

    @classmethod
    def from_json(cls, d: dict[str, object]) -> WorkspaceDiff:
        import base64

        files: dict[str, bytes] = {}
        for k, v in dict(d.get("files") or {}).items():  # type: ignore[call-overload]
            files[k] = v["text"].encode() if "text" in v else base64.b64decode(v["b64"])
        return cls(
            files=files,
            deleted=tuple(d.get("deleted") or ()),  # type: ignore[arg-type]
            flags=tuple(d.get("flags") or ()),  # type: ignore[arg-type]
            detail=str(d.get("detail") or ""),
        )


@runtime_checkable
class Sandbox(Protocol):
    """One isolated environment. All paths are sandbox paths (relative ones are under /workspace)."""

    id: str

    async def exec(
        self,
        cmd: list[str] | str,
        timeout: float = 30.0,
        env: dict[str, str] | None = None,
        cwd: str = WORKSPACE,
        stdin: bytes | None = None,
    ) -> ExecResult: ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, content: bytes) -> None: ...

    async def delete_file(self, path: str) -> None: ...

    async def list_dir(self, path: str = WORKSPACE) -> list[str]: ...

    async def diff(self) -> WorkspaceDiff: ...

    async def snapshot(self) -> str: ...

    async def restore(self, snapshot_id: str) -> None: ...

    async def reset(self) -> None: ...

    async def close(self) -> None: ...


class SandboxBackend(Protocol):
    """Makes sandboxes. ``name`` picks it from configs (``local``, later ``oci``, ``ray``)."""

    name: str

    async def create(self, spec: SandboxSpec) -> Sandbox: ...

    async def aclose(self) -> None:
        """Let go of what the backend holds between sandboxes (pre-started ones); its owner calls it once."""
        ...
