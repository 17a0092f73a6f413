"""Which sandbox backend to use, as configuration: one :data:`BackendConfig`, built by :func:`make_backend`.

The CLI (``--backend local|oci``), training configs (``backend: {kind: oci, image: ...}``) and the
Python API all choose a backend this way, so the OCI backend is as reachable as the local one. Both
run a task's pinned environment layer (``SandboxSpec.environment``); a task whose ``[environment]``
names an ``image`` needs the OCI backend (the local one says so in one line).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from sparring.errors import ConfigError
from sparring.sandbox.base import SandboxBackend


class LocalBackendConfig(BaseModel):
    """The local backend: bubblewrap + overlayfs + cgroups on this host (the default)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["local"] = "local"
    root: Path | None = Field(None, description="Where sandboxes live (default $SPARRING_SANDBOX_ROOT).")
    mode: Literal["auto", "copy"] = Field(
        "auto", description="auto: overlay when root, else copy; copy: force the non-root fallback."
    )
    prefork: int | None = Field(
        None,
        ge=0,
        le=64,
        description="Sandboxes kept started per sandbox shape, so a create is one mount (0: off; root only; "
        "default $SPARRING_SANDBOX_PREFORK, else 0).",
    )


class OCIBackendConfig(BaseModel):
    """The OCI backend: one podman (runc) container per sandbox; needs root, podman and runc."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["oci"] = "oci"
    image: str | None = Field(
        None,
        description="Default image of sandboxes whose task names none (default: the local busybox image).",
    )
    root: Path | None = Field(None, description="Where sandboxes live (default $SPARRING_SANDBOX_ROOT).")


BackendConfig = Annotated[LocalBackendConfig | OCIBackendConfig, Field(discriminator="kind")]
BACKEND_KINDS = ("local", "oci")
_ADAPTER: TypeAdapter[LocalBackendConfig | OCIBackendConfig] = TypeAdapter(BackendConfig)


def backend_config(kind: str) -> LocalBackendConfig | OCIBackendConfig:
    """The default config of backend ``kind`` (what ``--backend KIND`` means)."""
    if kind not in BACKEND_KINDS:
        raise ConfigError(f"unknown backend {kind!r}: use one of {', '.join(BACKEND_KINDS)}")
    return _ADAPTER.validate_python({"kind": kind})


def make_backend(config: LocalBackendConfig | OCIBackendConfig | None = None) -> SandboxBackend:
    """The backend ``config`` describes (default: the local one)."""
    cfg = config if config is not None else LocalBackendConfig()
    if isinstance(cfg, OCIBackendConfig):
        from sparring.sandbox.oci.backend import OCIBackend

        return OCIBackend(image=cfg.image, root=cfg.root)
    from sparring.sandbox.local.backend import LocalBackend

    return LocalBackend(root=cfg.root, mode=cfg.mode, prefork=cfg.prefork)
