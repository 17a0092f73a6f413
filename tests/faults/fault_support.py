"""Fault injectors around real components: real sandboxes that get SIGKILLed or SIGSTOPped,
a real judge that crashes, a real HTTP policy server that misbehaves."""

from __future__ import annotations

import asyncio
import http.server
import json
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any

from sparring.policy.base import ActRequest, PolicyTask
from sparring.policy.scripted import OraclePolicy
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.loader import Task
from sparring.trajectory import Trajectory


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class FaultySandbox:
    """A real sandbox; before the exec the backend picks, its processes get a real signal."""

    def __init__(self, real: Any, owner: FaultyBackend) -> None:
        self._real, self._owner = real, owner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    async def exec(self, *args: Any, **kwargs: Any) -> Any:
        self._owner.execs += 1
        if self._owner.execs in self._owner.fault_on_exec:
            bwrap = self._real.channel.proc.pid
            if self._owner.mode == "kill":  # the whole sandbox dies
                os.kill(bwrap, signal.SIGKILL)
            else:  # the exec server stops answering (hangs)
                for pid in _children(bwrap):
                    os.kill(pid, signal.SIGSTOP)
            self._owner.faults += 1
        return await self._real.exec(*args, **kwargs)


class FaultyBackend:
    """The real local backend; the Nth exec over all its sandboxes (N in ``fault_on_exec``) is faulted."""

    name = "faulty"

    def __init__(self, real: Any, fault_on_exec: set[int], mode: str = "kill") -> None:
        self.real, self.fault_on_exec, self.mode = real, fault_on_exec, mode
        self.execs = 0
        self.faults = 0
        self.restored_from_snapshot = 0

    async def create(self, spec: Any, snapshot: str | None = None) -> FaultySandbox:
        if snapshot is not None:
            self.restored_from_snapshot += 1
        return FaultySandbox(await self.real.create(spec, snapshot=snapshot), self)


class CrashingJudge:
    """The real judge, whose first ``crashes`` calls crash (a bug, not a JudgeError)."""

    def __init__(self, real: Any, crashes: int) -> None:
        self.real, self.crashes = real, crashes
        self.version = real.version
        self.calls = 0

    async def score(self, task: Task, diff: Any) -> Any:
        self.calls += 1
        if self.calls <= self.crashes:
            raise RuntimeError("judge worker segfaulted (injected)")
        return await self.real.score(task, diff)


def assert_accounted(store: SQLiteStore, run_id: str, expected: int) -> list[Trajectory]:
    """Every requested sample of ``run_id`` is stored exactly once, and no failure carries a reward."""
    total, trajs = store.search(_q(run_id))
    assert total == expected, f"{total} stored, {expected} requested"
    assert len({t.id for t in trajs}) == expected
    assert len({(t.group_id, t.sample_index) for t in trajs}) == expected
    for t in trajs:
        if t.status in ("infra_error", "policy_error", "judge_error"):
            assert t.reward is None, f"{t.status} stored with reward {t.reward}"
            assert t.error
        if t.attempts > 1:
            assert t.infra_errors and len(t.infra_errors) >= t.attempts - 1
    return trajs


def _q(run_id: str) -> Any:
    from sparring.store.base import TrajQuery

    return TrajQuery(run_id=run_id, limit=None)


# ------------------------------------------------------------------ a misbehaving policy server


class FaultyPolicyServer:
    """A real OpenAI-compatible HTTP server playing the oracle on ``task``, with faults on demand.

    ``mode``: ``ok``; ``hang`` (never answers a completion); ``garbage`` (200 with
    a body that is not JSON); ``drop`` (closes the connection without answering);
    ``flaky`` (drops every other completion request, answers the rest);
    ``malformed_first`` (the first reply holds a malformed text tool call).
    """

    def __init__(self, task: Task, mode: str = "ok", model: str = "oracle-7b") -> None:
        self.task, self.mode, self.model = task, mode, model
        self.completions = 0
        self._stop = threading.Event()
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                return None

            def _send(self, code: int, body: bytes, ctype: str = "application/json") -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, json.dumps({"object": "list", "data": [{"id": owner.model}]}).encode())
                else:
                    self._send(404, b'{"error": "not found"}')

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                owner.completions += 1
                mode = owner.mode
                if mode == "flaky":
                    mode = "drop" if owner.completions % 2 == 1 else "ok"
                if mode == "hang":
                    owner._stop.wait(30)
                    self.close_connection = True
                    return
                if mode == "drop":
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
                if mode == "malformed_first" and owner.completions == 1:
                    bad = 'Reading it.\n<tool_call>{"name": "read_file", "arguments": {"path": </tool_call>'
                    out = {"id": "x", "object": "chat.completion", "model": owner.model,
                           "choices": [{"index": 0, "message": {"role": "assistant", "content": bad}}]}  # fmt: skip
                    self._send(200, json.dumps(out).encode())
                    return
                if mode == "garbage":
                    self._send(200, b"<html>502 upstream sad</html>", "text/html")
                    return
                req = ActRequest(
                    messages=body["messages"], tools=body.get("tools") or [], task=PolicyTask.of(owner.task)
                )
                msg = asyncio.run(OraclePolicy().for_task(owner.task).act(req)).message
                out = {"id": "x", "object": "chat.completion", "model": owner.model,
                       "choices": [{"index": 0, "message": msg, "finish_reason": "tool_calls"}]}  # fmt: skip
                self._send(200, json.dumps(out).encode())

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FaultyPolicyServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()
