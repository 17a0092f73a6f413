"""Sandboxes: protocol, local bubblewrap+overlayfs backend, pool."""

from sparring.sandbox.base import (
    EnvironmentRef,
    ExecResult,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
    WorkspaceDiff,
)
from sparring.sandbox.oci import OCIBackend

__all__ = [
    "EnvironmentRef",
    "ExecResult",
    "OCIBackend",
    "Sandbox",
    "SandboxBackend",
    "SandboxSpec",
    "WorkspaceDiff",
]
