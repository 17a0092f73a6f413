"""Sandboxes: protocol, local bubblewrap+overlayfs backend, pool."""

from sparring.sandbox.base import ExecResult, Sandbox, SandboxBackend, SandboxSpec, WorkspaceDiff
from sparring.sandbox.oci import OCIBackend

__all__ = ["ExecResult", "OCIBackend", "Sandbox", "SandboxBackend", "SandboxSpec", "WorkspaceDiff"]
