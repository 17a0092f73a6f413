"""Helpers for the security suite (fixtures are in conftest.py).

Every attack runs inside a real sandbox. The payloads are written so that even
a sandbox that failed could not harm the host: bounded loops, short timeouts,
scratch paths in pytest's tmp dirs only, no kill(-1), no walk from /.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from sparring.sandbox.base import Sandbox, SandboxSpec

CANARY_TEXT = "sparring-canary-do-not-leak"


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(coro)  # type: ignore[arg-type]


def in_sandbox(backend: Any, spec: SandboxSpec, fn: Callable[[Sandbox], Awaitable[Any]]) -> Any:
    """Create a sandbox, run ``fn`` on it, always close it."""

    async def go() -> Any:
        sb = await backend.create(spec)
        try:
            return await fn(sb)
        finally:
            await sb.close()

    return run(go())


def unique_sleep_arg() -> str:
    """A ``sleep`` duration that is also a marker nothing else on the host has in its argv."""
    return f"{50 + uuid.uuid4().int % 40}.{uuid.uuid4().int % 10**9:09d}"
