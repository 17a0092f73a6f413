"""OpenAIPolicy against a real HTTP server on 127.0.0.1 that plays scripted chat-completions replies."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sparring.errors import PolicyError
from sparring.policy.base import Action, ActRequest, Policy, PolicyTask
from sparring.policy.openai_http import OpenAIPolicy
from sparring.tasks.loader import Task
from sparring.tasks.spec import TaskSpec
from sparring.trajectory import TokenTrace
from tests_support import HANG_S, wait_until

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a command.",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
    }
]


@dataclass
class Reply:
    status: int = 200
    body: Any = None
    delay_s: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    hold_until_in_flight: int = 0
    """Answer only once this many requests have been in flight at once (or after HANG_S): overlap is
    proven by the requests meeting, not by hoping a delay outlasts a loaded host's scheduling."""


def completion(message: dict[str, Any], **extra: Any) -> dict[str, Any]:
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    choice.update(extra.pop("choice", {}))
    return {
        "id": "cmpl-1",
        "object": "chat.completion",
        "model": "m",
        "choices": [choice],
        "usage": {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        **extra,
    }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 64  # the default backlog of 5 drops bursts of concurrent connects for ~1 s


class ScriptedServer:
    """Replies in order from ``script`` (the last one repeats); records every request."""

    def __init__(self, script: list[Reply] | Callable[[int], Reply]) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.in_flight = self.max_in_flight = 0
        self._lock = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                with outer._lock:
                    n = len(outer.requests)
                    outer.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "json": json.loads(raw)}
                    )
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                    outer._lock.notify_all()
                reply = outer.reply(n)
                if reply.hold_until_in_flight:
                    with outer._lock:
                        outer._lock.wait_for(
                            lambda: outer.max_in_flight >= reply.hold_until_in_flight, HANG_S
                        )
                time.sleep(reply.delay_s)
                with outer._lock:
                    outer.in_flight -= 1
                data = reply.body.encode() if isinstance(reply.body, str) else json.dumps(reply.body).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for k, v in reply.headers.items():
                        self.send_header(k, v)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout test)
                    pass

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def reply(self, n: int) -> Reply:
        if callable(self.script):
            return self.script(n)
        return self.script[min(n, len(self.script) - 1)]

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def serve() -> Iterator[Callable[..., ScriptedServer]]:
    servers: list[ScriptedServer] = []

    def start(script: list[Reply] | Callable[[int], Reply]) -> ScriptedServer:
        servers.append(ScriptedServer(script))
        return servers[-1]

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    spec = TaskSpec(id="t1", family="code-repair", instruction="Fix it.", success_criteria="Tests pass.")
    return Task(spec=spec, path=Path(tmp_path_factory.mktemp("task")), digest="0" * 64)


def act(policy: OpenAIPolicy, task: Task, messages: list[dict[str, Any]] | None = None) -> Action:
    req = ActRequest(
        messages=messages or [{"role": "user", "content": "fix the bug"}],
        tools=TOOLS,
        task=PolicyTask.of(task),
    )

    async def go() -> Action:
        try:
            return await policy.act(req)
        finally:
            await policy.close()

    return asyncio.run(go())


def test_is_a_policy_named_by_its_spec() -> None:
    p = OpenAIPolicy("http://127.0.0.1:1/v1/", "qwen")
    assert isinstance(p, Policy)
    assert p.name == "openai:http://127.0.0.1:1/v1#qwen"
    assert p.version == 0


def test_native_tool_call_becomes_assistant_message(serve, task: Task) -> None:
    msg = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            },
            {"type": "function", "function": {"name": "bash", "arguments": {"command": "pwd"}}},
        ],
    }
    server = serve([Reply(body=completion(msg))])
    action = act(OpenAIPolicy(server.base_url, "m", api_key="sk-test", max_tokens=64, temperature=0.2), task)
    assert action.message == {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_abc",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "ls"}'},
            },
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "bash", "arguments": '{"command": "pwd"}'},
            },
        ],
    }
    assert action.trace is None  # no logprobs in the reply
    assert action.usage == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}
    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions"
    assert req["headers"]["Authorization"] == "Bearer sk-test"
    body = req["json"]
    assert body["model"] == "m" and body["messages"] == [{"role": "user", "content": "fix the bug"}]
    assert body["tools"] == TOOLS and body["tool_choice"] == "auto" and body["logprobs"] is True
    assert (body["max_tokens"], body["temperature"]) == (64, 0.2)


def test_text_tool_calls_are_parsed_and_content_kept(serve, task: Task) -> None:
    text = 'I will look.\n<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call>'
    server = serve([Reply(body=completion({"role": "assistant", "content": text}))])
    history = [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_0", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_0", "content": "ok"},
    ]
    action = act(OpenAIPolicy(server.base_url, "m"), task, history)
    assert action.message["content"] == text
    calls = action.message.get("tool_calls")
    assert calls is not None, "the text's tool call was not parsed"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [
        ("bash", {"command": "ls -la"})
    ]
    assert calls[0]["id"] == "call_1"  # unique after the one call already in the conversation


def test_plain_text_reply_has_no_tool_calls(serve, task: Task) -> None:
    server = serve([Reply(body=completion({"role": "assistant", "content": "All done, nothing to call."}))])
    action = act(OpenAIPolicy(server.base_url, "m"), task)
    assert action.message == {"role": "assistant", "content": "All done, nothing to call."}


def test_500_twice_then_200_succeeds_on_the_third_request(serve, task: Task) -> None:
    ok = completion({"role": "assistant", "content": "hi"})
    server = serve([Reply(500, {"error": "boom"}), Reply(503, "overloaded"), Reply(body=ok)])
    action = act(OpenAIPolicy(server.base_url, "m", max_retries=3, backoff_s=0.01), task)
    assert action.message["content"] == "hi"
    assert len(server.requests) == 3


def test_429_is_retried_honouring_retry_after(serve, task: Task) -> None:
    ok = completion({"role": "assistant", "content": "hi"})
    server = serve([Reply(429, {"error": "slow down"}, headers={"Retry-After": "0"}), Reply(body=ok)])
    act(OpenAIPolicy(server.base_url, "m", max_retries=1, backoff_s=0.01), task)
    assert len(server.requests) == 2


def test_always_500_raises_policy_error_after_max_retries(serve, task: Task) -> None:
    server = serve([Reply(500, {"error": {"message": "CUDA out of memory"}})])
    with pytest.raises(PolicyError) as err:
        act(OpenAIPolicy(server.base_url, "m", max_retries=2, backoff_s=0.01), task)
    assert len(server.requests) == 3
    msg = str(err.value)
    assert "\n" not in msg and "HTTP 500" in msg and "CUDA out of memory" in msg and "3 attempt" in msg


def test_4xx_is_not_retried(serve, task: Task) -> None:
    server = serve([Reply(400, {"error": {"message": "model 'x' does not exist"}})])
    with pytest.raises(PolicyError, match="HTTP 400.*does not exist"):
        act(OpenAIPolicy(server.base_url, "x", max_retries=3, backoff_s=0.01), task)
    assert len(server.requests) == 1


def test_server_slower_than_timeout_raises_policy_error(serve, task: Task) -> None:
    server = serve([Reply(body=completion({"role": "assistant", "content": "late"}), delay_s=5.0)])
    with pytest.raises(PolicyError, match=r"timed out after 0\.2s.*2 attempt"):
        act(OpenAIPolicy(server.base_url, "m", timeout_s=0.2, max_retries=1, backoff_s=0.01), task)
    # the server's thread may record the second request after the client gave up on it
    assert wait_until(lambda: len(server.requests) == 2)


def test_connection_refused_raises_policy_error(task: Task) -> None:
    with socket.socket() as s:  # a loopback port held bound but not listening: refused, and no one else's
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        with pytest.raises(PolicyError, match="connection failed"):
            act(OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", max_retries=1, backoff_s=0.01), task)


def test_non_json_200_raises_policy_error(serve, task: Task) -> None:
    server = serve([Reply(200, "<html>proxy error</html>")])
    with pytest.raises(PolicyError, match="not JSON"):
        act(OpenAIPolicy(server.base_url, "m"), task)


def _logprobs(tokens: list[str], lps: list[float]) -> dict[str, Any]:
    return {
        "content": [
            {"token": t, "logprob": lp, "bytes": None, "top_logprobs": []}
            for t, lp in zip(tokens, lps, strict=True)
        ]
    }


def test_vllm_token_ids_and_logprobs_become_a_token_trace(serve, task: Task) -> None:
    body = completion(
        {"role": "assistant", "content": "hi!"},
        prompt_token_ids=[1, 2, 3, 4],
        choice={"token_ids": [10, 11, 12], "logprobs": _logprobs(["hi", "!", ""], [-0.1, -0.2, -0.3])},
    )
    server = serve([Reply(body=body)])
    action = act(OpenAIPolicy(server.base_url, "m"), task)
    assert action.trace == TokenTrace(
        prompt_ids=[1, 2, 3, 4], completion_ids=[10, 11, 12], logprobs=[-0.1, -0.2, -0.3]
    )
    assert server.requests[0]["json"]["return_token_ids"] is True
    assert action.usage["completion_tokens"] == 3


def test_token_id_strings_in_logprobs_give_completion_ids(serve, task: Task) -> None:
    lps = _logprobs(["token_id:7", "token_id:8"], [-1.0, -0.5])
    server = serve([Reply(body=completion({"role": "assistant", "content": "ab"}, choice={"logprobs": lps}))])
    action = act(OpenAIPolicy(server.base_url, "m"), task)
    assert action.trace == TokenTrace(prompt_ids=[], completion_ids=[7, 8], logprobs=[-1.0, -0.5])


def test_logprobs_without_token_ids_give_no_trace(serve, task: Task) -> None:
    lps = _logprobs(["a", "b"], [-1.0, -0.5])
    server = serve([Reply(body=completion({"role": "assistant", "content": "ab"}, choice={"logprobs": lps}))])
    action = act(OpenAIPolicy(server.base_url, "m", token_ids=False), task)
    assert action.trace is None
    assert "return_token_ids" not in server.requests[0]["json"]
    assert action.usage == {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}


def test_one_policy_serves_concurrent_turns_over_a_pool(serve, task: Task) -> None:
    server = serve(
        lambda n: Reply(body=completion({"role": "assistant", "content": f"r{n}"}), hold_until_in_flight=16)
    )
    policy = OpenAIPolicy(server.base_url, "m")
    req = ActRequest(messages=[{"role": "user", "content": "x"}], tools=TOOLS, task=PolicyTask.of(task))

    async def go() -> list[Action]:
        try:
            return await asyncio.gather(*(policy.act(req) for _ in range(16)))
        finally:
            await policy.close()

    actions = asyncio.run(go())
    assert len({a.message["content"] for a in actions}) == 16
    assert server.max_in_flight == 16  # all overlapped: none queued behind another on one connection


def test_malformed_text_tool_call_comes_back_as_parse_errors(serve, task: Task) -> None:
    text = 'Let me run it.\n<tool_call>{"name": "bash", "arguments": {"command": </tool_call>'
    server = serve([Reply(body=completion({"role": "assistant", "content": text}))])
    action = act(OpenAIPolicy(server.base_url, "m"), task)
    assert action.message["content"] == text and "tool_calls" not in action.message
    assert action.message["parse_errors"] and all(isinstance(e, str) for e in action.message["parse_errors"])
