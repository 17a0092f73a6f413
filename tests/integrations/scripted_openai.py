"""A small real OpenAI-compatible chat server (HTTP, streaming or not) that replies from a script.

The reply is chosen by the conversation: ``script(messages)`` returns the
assistant text for the next turn. It is a real uvicorn server on a loopback
port, so clients (verifiers' eval loop, the ``openai`` package) speak real HTTP to it.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import StreamingResponse

Script = Callable[[list[dict[str, Any]]], str]


def _app(script: Script, requests: list[dict[str, Any]]) -> FastAPI:
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Any:
        body = await request.json()
        requests.append(body)
        text = script(body["messages"])
        base = {"id": f"c{len(requests)}", "created": 0, "model": body["model"]}
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if not body.get("stream"):
            msg = {"role": "assistant", "content": text}
            choice = {"index": 0, "finish_reason": "stop", "message": msg}
            return {**base, "object": "chat.completion", "choices": [choice], "usage": usage}

        def chunks() -> Iterator[str]:
            head = {**base, "object": "chat.completion.chunk"}
            for choices, extra in (
                ([{"index": 0, "delta": {"role": "assistant", "content": text}, "finish_reason": None}], {}),
                ([{"index": 0, "delta": {}, "finish_reason": "stop"}], {}),
                ([], {"usage": usage}),
            ):
                yield "data: " + json.dumps({**head, "choices": choices, **extra}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(chunks(), media_type="text/event-stream")

    return app


class ScriptedServer:
    """The server, started on a free loopback port (``url`` ends in ``/v1``); ``stop()`` ends it."""

    def __init__(self, script: Script) -> None:
        self.requests: list[dict[str, Any]] = []
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        self._server = uvicorn.Server(uvicorn.Config(_app(script, self.requests), log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:  # started is set once it accepts
            assert time.monotonic() < deadline, "the scripted server did not start"
            time.sleep(0.02)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=30)
