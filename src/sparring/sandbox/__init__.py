"""Sandboxes: protocol, local bubblewrap+overlayfs backend, pool."""

from sparring.sandbox.base import ExecResult, Sandbox, SandboxBackend, SandboxSpec, WorkspaceDiff

__all__ = ["ExecResult", "Sandbox", "SandboxBackend", "SandboxSpec", "WorkspaceDiff"]
