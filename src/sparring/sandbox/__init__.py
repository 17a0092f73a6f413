"""Sandboxes: the protocols and records (``base``), backend choice (``config``), the warm ``pool``.

The parts, bottom-up (no part imports one above it): ``storage`` (host-side trees, layers,
workspace diffs); ``isolation`` (feature detection, seccomp, cgroups, namespaces, mounts, the
reaper); the backends ``local`` (bubblewrap) and ``oci`` (podman); ``config`` and ``bench``, which
build backends. Backends are imported from their modules (``sparring.sandbox.local.backend``).
"""

from sparring.sandbox.base import (
    EnvironmentRef,
    ExecResult,
    Sandbox,
    SandboxBackend,
    SandboxSpec,
    WorkspaceDiff,
)

__all__ = [
    "EnvironmentRef",
    "ExecResult",
    "Sandbox",
    "SandboxBackend",
    "SandboxSpec",
    "WorkspaceDiff",
]
