"""An OpenEnv-compatible environment server: Sparring Environments over HTTP and WebSocket.

A remote trainer (verl, SkyRL, any language) drives Sparring tasks through it;
every session is one :class:`~sparring.env.Environment` with its own sandbox.
It speaks OpenEnv's wire format, so ``openenv``'s own ``GenericEnvClient``
drives it over ``/ws`` as it is, and plain HTTP works too:

- ``GET /tasks`` -> ``{"tasks": [{"id", "digest", "family"}...], "count"}``: the task ids it serves,
  in the order ``/reset`` picks from;
- ``POST /reset`` ``{"seed", "task_id", "session_id"?}`` -> ``{"observation", "reward", "done"}``;
  without ``task_id`` it plays the ``seed``-th task of that list (``seed`` modulo its length;
  ``seed`` defaults to 0); the observation carries ``session_id`` (a new session, or ``session_id``'s, restarted),
  ``messages`` and ``tools`` (OpenAI shapes);
- ``POST /step`` ``{"session_id", "action"}`` -> the same shape; the action is the
  OpenAI assistant message (``role``, ``content``, ``tool_calls``) or ``{"text": ...}``,
  raw sampled text whose tool calls Sparring parses;
- ``GET /state?session_id=`` (``POST /state`` too), ``POST /close`` ``{"session_id"}``,
  ``GET /health``, ``GET /schema``;
- ``/ws``: OpenEnv's messages (``reset``, ``step``, ``state``, ``close``), one session per connection.

Why the limits: each session holds a real sandbox, so the server bounds them
(``max_sessions``; beyond it ``503`` with ``Retry-After``, never a queue that
grows without end), closes sessions idle longer than ``idle_s`` (a trainer
that crashed leaks nothing), refuses bodies over ``max_body_bytes`` (``413``)
and listens on loopback unless told otherwise (the CLI's ``--allow-remote``).
Client mistakes are ``4xx`` with a one-line ``detail``: unknown or expired
session ``404``, malformed JSON ``400``, malformed action ``422``, a step on a
finished episode or on a session already busy ``409``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.responses import JSONResponse

from sparring.env import Environment, Observation, SampledTurn, StepResult
from sparring.errors import SandboxError, SparringError
from sparring.integrations.tasks import TaskSet
from sparring.trajectory import TokenTrace

ASGIApp = Callable[
    [MutableMapping[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]],
    Awaitable[None],
]


@dataclass(frozen=True)
class ServerLimits:
    """How much the server takes on (see the module docstring for why each exists)."""

    max_sessions: int = 64
    """Sessions (sandboxes) alive at once; a reset beyond it is answered 503 with Retry-After."""
    idle_s: float = 600.0
    """A session untouched this long is closed and its sandbox freed; later calls on it get 404."""
    max_body_bytes: int = 1 << 20
    """Largest request body (HTTP) or message (WebSocket); larger ones get 413 (or a WS close)."""
    retry_after_s: int = 2
    """What Retry-After tells a client turned away for capacity."""


class ClientFault(Exception):
    """A request the client got wrong: an HTTP status and a one-line detail."""

    def __init__(self, status: int, detail: str, *, code: str = "VALIDATION_ERROR") -> None:
        super().__init__(detail)
        self.status, self.detail, self.code = status, detail, code


@dataclass
class Session:
    """One client's episode: its Environment and when it was last used."""

    id: str
    env: Environment | None = None
    last_used: float = field(default_factory=time.monotonic)
    busy: bool = False
    steps: int = 0
    last_reward: float | None = None


def _result_payload(res: StepResult, session_id: str) -> dict[str, Any]:
    obs = {"session_id": session_id, "messages": res.messages, "terminated": res.terminated,
           "truncated": res.truncated, "info": res.info}  # fmt: skip
    return {"observation": obs, "reward": res.reward, "done": res.done}


def _reset_payload(obs: Observation, session_id: str) -> dict[str, Any]:
    o = {"session_id": session_id, "messages": obs.messages, "tools": obs.tools, "info": obs.info}
    return {"observation": o, "reward": None, "done": False}


def parse_action(raw: Any) -> dict[str, Any] | SampledTurn:
    """An assistant message dict (checked field by field) or ``{"text": ...}``; else ClientFault 422."""
    if not isinstance(raw, dict):
        raise ClientFault(
            422, f"action must be a JSON object (an assistant message), got {type(raw).__name__}"
        )
    if set(raw) == {"text"} or (set(raw) <= {"text", "completion_ids"} and "text" in raw):
        if not isinstance(raw["text"], str):
            raise ClientFault(422, "action.text must be a string (the raw sampled text)")
        ids = raw.get("completion_ids") or []
        if not (isinstance(ids, list) and all(isinstance(i, int) for i in ids)):
            raise ClientFault(422, "action.completion_ids must be a list of integers")
        return SampledTurn(
            text=raw["text"], trace=TokenTrace(prompt_ids=[], completion_ids=ids) if ids else None
        )
    unknown = set(raw) - {"role", "content", "tool_calls", "reasoning_content", "name"}
    if unknown:
        raise ClientFault(
            422, f"action has unknown field(s) {sorted(unknown)}: send role, content, tool_calls"
        )
    if raw.get("role", "assistant") != "assistant":
        raise ClientFault(422, f"action.role must be 'assistant', got {raw.get('role')!r}")
    if not isinstance(raw.get("content") or "", str):
        raise ClientFault(422, "action.content must be a string or null")
    calls = raw.get("tool_calls") or []
    if not isinstance(calls, list):
        raise ClientFault(422, "action.tool_calls must be a list")
    for i, c in enumerate(calls):
        fn = c.get("function") if isinstance(c, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            raise ClientFault(422, f"action.tool_calls[{i}] needs a function object with a string name")
        if not isinstance(fn.get("arguments", "{}"), str | dict):
            raise ClientFault(
                422, f"action.tool_calls[{i}].function.arguments must be a JSON string or object"
            )
    msg = {"role": "assistant", "content": raw.get("content") or "", "tool_calls": calls}
    if not calls:
        msg.pop("tool_calls")
    return msg


class SessionManager:
    """The live sessions: created on reset within ``max_sessions``, stepped one call at a time,
    closed on request, on expiry or at shutdown (each close frees its sandbox)."""

    def __init__(self, tasks: TaskSet, limits: ServerLimits) -> None:
        self.tasks, self.limits = tasks, limits
        self.sessions: dict[str, Session] = {}
        self._lock = asyncio.Lock()
        self.created = 0
        self.expired = 0

    async def reserve(self, session_id: str | None = None) -> Session:
        """A new session slot (or the existing one ``session_id``); 503 when all slots are taken."""
        async with self._lock:
            if session_id is not None:
                return self.get(session_id)
            if len(self.sessions) >= self.limits.max_sessions:
                raise ClientFault(503, f"all {self.limits.max_sessions} sessions are in use: retry later "
                                       "(or close finished sessions)", code="CAPACITY_REACHED")  # fmt: skip
            s = Session(id=uuid.uuid4().hex)
            self.sessions[s.id] = s
            self.created += 1
            return s

    def get(self, session_id: Any) -> Session:
        if not isinstance(session_id, str) or not session_id:
            raise ClientFault(422, "session_id is missing: send the session_id the reset returned")
        s = self.sessions.get(session_id)
        if s is None:
            raise ClientFault(404, f"unknown or expired session {session_id!r}: POST /reset for a new one",
                              code="SESSION_ERROR")  # fmt: skip
        return s

    @contextlib.asynccontextmanager
    async def _use(self, s: Session) -> AsyncIterator[None]:
        if s.busy:
            raise ClientFault(409, f"session {s.id} is busy with another call: send one call at a time",
                              code="SESSION_ERROR")  # fmt: skip
        s.busy = True
        try:
            yield
        finally:
            s.busy = False
            s.last_used = time.monotonic()

    async def reset(self, data: dict[str, Any], session_id: str | None = None) -> dict[str, Any]:
        seed = data.get("seed") or 0
        task_id = data.get("task_id")
        if not isinstance(seed, int) or (task_id is not None and not isinstance(task_id, str)):
            raise ClientFault(422, "reset takes an integer seed and a string task_id")
        try:
            task = self.tasks.task(task_id, seed)
        except SparringError as e:
            raise ClientFault(404, str(e)) from None
        s = await self.reserve(session_id)
        try:
            async with self._use(s):
                if s.env is not None:
                    await s.env.aclose()
                s.env = self.tasks.environment(task, seed)
                s.steps, s.last_reward = 0, None
                obs = await s.env.areset(seed)
        except BaseException:
            if s.env is None or s.env.sandbox is None:
                await self.close(s.id)
            raise
        return _reset_payload(obs, s.id)

    async def step(self, session_id: Any, raw_action: Any) -> dict[str, Any]:
        s = self.get(session_id)
        action = parse_action(raw_action)
        async with self._use(s):
            env = s.env
            if env is None:
                raise ClientFault(409, "the session has no episode: POST /reset first", code="SESSION_ERROR")
            if env.done:
                raise ClientFault(409, f"the episode is over (status {env.status}): POST /reset to start another",
                                  code="SESSION_ERROR")  # fmt: skip
            res = await env.astep(action)
            s.steps += 1
            s.last_reward = res.reward
            if res.done:  # judged: the sandbox is no longer needed, free it now
                await env.aclose()
        return _result_payload(res, s.id)

    def state(self, session_id: Any) -> dict[str, Any]:
        s = self.get(session_id)
        s.last_used = time.monotonic()
        env = s.env
        out: dict[str, Any] = {"episode_id": s.id, "session_id": s.id, "step_count": s.steps}
        if env is not None:
            out.update(task_id=env.task.id, seed=env.seed, done=env.done, status=env.public_status,
                       reward=env.reward, messages=env.messages, **env.judge_info())  # fmt: skip
        return out

    async def close(self, session_id: str) -> bool:
        async with self._lock:
            s = self.sessions.pop(session_id, None)
        if s is None:
            return False
        if s.env is not None:
            await s.env.aclose()
        return True

    async def reap(self) -> int:
        """Close the sessions idle longer than ``idle_s`` (never one in the middle of a call)."""
        now = time.monotonic()
        stale = [s.id for s in list(self.sessions.values())
                 if not s.busy and now - s.last_used > self.limits.idle_s]  # fmt: skip
        for sid in stale:
            if await self.close(sid):
                self.expired += 1
        return len(stale)

    async def close_all(self) -> None:
        for sid in list(self.sessions):
            await self.close(sid)


DRAIN_FACTOR = 16


class BodyLimit:
    """ASGI middleware: HTTP bodies over ``limit`` bytes are answered 413 before the app reads them
    (a body without a length is counted as it arrives)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app, self.limit = app, limit

    async def _reply_413(self, send: Callable[[Any], Awaitable[None]]) -> None:
        body = json.dumps({"detail": f"request body over {self.limit} bytes: send a smaller action"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close")]})  # fmt: skip
        await send({"type": "http.response.body", "body": body})

    async def __call__(self, scope: MutableMapping[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:  # fmt: skip
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            msg = await receive()
            if msg["type"] != "http.request":
                break
            size += len(msg.get("body", b""))
            more = msg.get("more_body", False)
            if size > self.limit:
                # read (and drop) the rest first, so the client sees the 413 rather than a reset
                # connection; beyond DRAIN_FACTOR times the limit it is cut off
                while more and size <= self.limit * DRAIN_FACTOR:
                    msg = await receive()
                    size += len(msg.get("body", b""))
                    more = msg.get("more_body", False) and msg["type"] == "http.request"
                return await self._reply_413(send)
            chunks.append(msg.get("body", b""))
        replay = [{"type": "http.request", "body": b"".join(chunks), "more_body": False}]

        async def receive_again() -> Any:
            return replay.pop() if replay else await receive()

        return await self.app(scope, receive_again, send)


def create_app(tasks: TaskSet, limits: ServerLimits | None = None) -> FastAPI:
    """The FastAPI application serving ``tasks`` (run it with uvicorn; see ``sparring serve-env``)."""
    lim = limits or ServerLimits()
    mgr = SessionManager(tasks, lim)

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async def reaper() -> None:
            while True:
                await asyncio.sleep(max(0.05, min(lim.idle_s / 4, 5.0)))
                with contextlib.suppress(Exception):
                    await mgr.reap()

        task = asyncio.create_task(reaper())
        try:
            yield
        finally:
            task.cancel()
            await mgr.close_all()

    app = FastAPI(title="sparring serve-env", lifespan=lifespan)
    app.state.sessions = mgr

    @app.exception_handler(ClientFault)
    async def _fault(request: Request, exc: ClientFault) -> JSONResponse:
        headers = {"Retry-After": str(lim.retry_after_s)} if exc.status in (429, 503) else None
        return JSONResponse({"detail": exc.detail, "code": exc.code}, status_code=exc.status, headers=headers)

    @app.exception_handler(SparringError)
    async def _infra(request: Request, exc: SparringError) -> JSONResponse:
        # a sandbox that could not start or hung is the server's trouble, worth retrying; the rest is a bug
        status = 503 if isinstance(exc, SandboxError) else 500
        headers = {"Retry-After": str(lim.retry_after_s)} if status == 503 else None
        return JSONResponse(
            {"detail": str(exc), "code": "EXECUTION_ERROR"}, status_code=status, headers=headers
        )

    async def body(request: Request) -> dict[str, Any]:
        raw = await request.body()
        if not raw:
            return {}
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ClientFault(
                400, f"request body is not JSON ({e.msg if hasattr(e, 'msg') else e})"
            ) from None
        if not isinstance(data, dict):
            raise ClientFault(400, "request body must be a JSON object")
        return data

    @app.post("/reset")
    async def reset(request: Request) -> dict[str, Any]:
        data = await body(request)
        return await mgr.reset(data, data.get("session_id"))

    @app.post("/step")
    async def step(request: Request) -> dict[str, Any]:
        data = await body(request)
        if "action" not in data:
            raise ClientFault(422, 'step needs an action: {"session_id": ..., "action": {assistant message}}')
        return await mgr.step(data.get("session_id"), data["action"])

    @app.get("/state")
    async def state_get(session_id: str = "") -> dict[str, Any]:
        return mgr.state(session_id)

    @app.post("/state")
    async def state_post(request: Request) -> dict[str, Any]:
        return mgr.state((await body(request)).get("session_id"))

    @app.post("/close")
    async def close(request: Request) -> dict[str, Any]:
        s = mgr.get((await body(request)).get("session_id"))
        return {"closed": await mgr.close(s.id)}

    @app.get("/tasks")
    async def task_list() -> dict[str, Any]:
        rows = [{"id": t.id, "digest": t.digest, "family": t.spec.family} for t in tasks.tasks]
        return {"tasks": rows, "count": len(rows)}

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "healthy", "active_sessions": len(mgr.sessions), "max_sessions": lim.max_sessions,
                "created": mgr.created, "expired": mgr.expired, "tasks": len(tasks.tasks)}  # fmt: skip

    @app.get("/schema")
    async def schema() -> dict[str, Any]:
        return {"action": {"description": "an OpenAI assistant message (role, content, tool_calls) or {text}"},
                "observation": {"fields": ["session_id", "messages", "tools", "terminated", "truncated", "info"]},
                "state": {"fields": ["session_id", "step_count", "task_id", "done", "status", "reward"]},
                "tasks": tasks.ids}  # fmt: skip

    @app.websocket("/ws")
    async def ws(sock: WebSocket) -> None:
        await sock.accept()
        sid: str | None = None

        async def error(message: str, code: str) -> None:
            await sock.send_text(json.dumps({"type": "error", "data": {"message": message, "code": code}}))

        try:
            while True:
                raw = await sock.receive_text()
                if len(raw.encode()) > lim.max_body_bytes:
                    await error(f"message over {lim.max_body_bytes} bytes", "VALIDATION_ERROR")
                    continue
                try:
                    msg = json.loads(raw)
                except json.JSONDecodeError as e:
                    await error(f"Invalid JSON: {e}", "INVALID_JSON")
                    continue
                kind = msg.get("type") if isinstance(msg, dict) else None
                data = msg.get("data") if isinstance(msg, dict) else None
                try:
                    if kind == "reset":
                        out = await mgr.reset(data if isinstance(data, dict) else {}, sid)
                        sid = out["observation"]["session_id"]
                        reply = {"type": "observation", "data": out}
                    elif kind == "step":
                        if sid is None:
                            raise ClientFault(409, "send reset before step", code="SESSION_ERROR")
                        reply = {"type": "observation", "data": await mgr.step(sid, data)}
                    elif kind == "state":
                        if sid is None:
                            raise ClientFault(409, "send reset before state", code="SESSION_ERROR")
                        reply = {"type": "state", "data": mgr.state(sid)}
                    elif kind == "close":
                        break
                    else:
                        await error(f"Unknown message type: {kind}", "UNKNOWN_TYPE")
                        continue
                except ClientFault as e:
                    await error(e.detail, e.code)
                    continue
                except SparringError as e:
                    await error(str(e), "EXECUTION_ERROR")
                    continue
                await sock.send_text(json.dumps(reply))
        except WebSocketDisconnect:
            pass
        finally:
            if sid is not None:
                await mgr.close(sid)
            with contextlib.suppress(Exception):
                await sock.close()

    app.add_middleware(BodyLimit, limit=lim.max_body_bytes)
    return app
