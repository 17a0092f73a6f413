"""The client of ``sparring serve-env`` over plain HTTP (httpx), and OpenEnv's own client over ``/ws``.

:class:`EnvServerClient` is one session: ``reset`` starts it (and restarts it),
``step`` sends an assistant message, ``state`` reads where it stands, ``close``
frees its sandbox on the server. Capacity refusals (503 with Retry-After) are
retried for up to ``wait_s``; other errors raise :class:`EnvServerError` with
the server's one-line detail. For OpenEnv's WebSocket client use
:func:`openenv_client` (needs the ``[openenv]`` extra).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from sparring.errors import SparringError

DEFAULT_TIMEOUT_S = 600.0  # how long a client waits for a reply: a submit's judging included


class EnvServerError(SparringError, RuntimeError):
    """The environment server refused a request (``status`` and the server's ``detail``)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"serve-env answered {status}: {detail}")
        self.status, self.detail = status, detail


@dataclass(frozen=True)
class EnvResult:
    """One reply: OpenEnv's ``observation`` / ``reward`` / ``done``."""

    observation: dict[str, Any]
    reward: float | None
    done: bool
    raw: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.observation.get("messages") or [])

    @property
    def info(self) -> dict[str, Any]:
        return dict(self.observation.get("info") or {})


class EnvServerClient:
    """One session on a ``sparring serve-env`` server (a context manager: closing frees the sandbox)."""

    def __init__(self, base_url: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, wait_s: float = 60.0,
                 client: httpx.Client | None = None) -> None:  # fmt: skip
        self.base_url = base_url.rstrip("/")
        self.wait_s = wait_s
        self._http = client or httpx.Client(timeout=timeout_s)
        self._own_http = client is None
        self.session_id: str | None = None
        self.tools: list[dict[str, Any]] = []

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + self.wait_s
        while True:
            r = self._http.post(self.base_url + path, json=body)
            if r.status_code in (429, 503) and time.monotonic() < deadline:
                time.sleep(
                    min(float(r.headers.get("Retry-After") or 1), max(0.0, deadline - time.monotonic()))
                )
                continue
            if r.status_code >= 400:
                try:
                    detail = str(r.json().get("detail"))
                except ValueError:
                    detail = r.text[:200]
                raise EnvServerError(r.status_code, detail)
            out: dict[str, Any] = r.json()
            return out

    @staticmethod
    def _result(data: dict[str, Any]) -> EnvResult:
        return EnvResult(data.get("observation") or {}, data.get("reward"), bool(data.get("done")), data)

    def reset(self, seed: int = 0, task_id: str | None = None) -> EnvResult:
        """Start an episode (a new session, or this one's sandbox replaced by a fresh one)."""
        body: dict[str, Any] = {"seed": seed}
        if task_id is not None:
            body["task_id"] = task_id
        if self.session_id is not None:
            body["session_id"] = self.session_id
        res = self._result(self._post("/reset", body))
        self.session_id = res.observation["session_id"]
        self.tools = list(res.observation.get("tools") or [])
        return res

    def step(self, action: dict[str, Any]) -> EnvResult:
        """Send one assistant message (``role``, ``content``, ``tool_calls``) or ``{"text": ...}``."""
        if self.session_id is None:
            raise EnvServerError(409, "call reset() before step()")
        return self._result(self._post("/step", {"session_id": self.session_id, "action": action}))

    def state(self) -> dict[str, Any]:
        if self.session_id is None:
            raise EnvServerError(409, "call reset() before state()")
        return self._post("/state", {"session_id": self.session_id})

    def close(self) -> None:
        """Free the session's sandbox on the server (idempotent)."""
        try:
            if self.session_id is not None:
                sid, self.session_id = self.session_id, None
                try:
                    self._post("/close", {"session_id": sid})
                except EnvServerError as e:
                    if e.status != 404:  # already expired: nothing left to free
                        raise
        finally:
            if self._own_http:
                self._http.close()

    def __enter__(self) -> EnvServerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def openenv_client(base_url: str, **kwargs: Any) -> Any:
    """OpenEnv's own ``GenericEnvClient`` on the server's ``/ws`` endpoint (async; ``.sync()`` for sync).

    Its replies wait as long as :class:`EnvServerClient`'s (600 s, ``message_timeout_s`` to change):
    OpenEnv's default of 60 s is shorter than a submit's judging on a busy machine (32 sessions
    judging at once under load timed out there), and a step that times out loses the episode."""
    try:
        from openenv.core.generic_client import GenericEnvClient
    except ImportError:
        raise SparringError("openenv is not installed: pip install 'sparring[openenv]'") from None
    kwargs.setdefault("message_timeout_s", DEFAULT_TIMEOUT_S)
    return GenericEnvClient(base_url=base_url, **kwargs)
