"""The OpenAI-compatible policy server: a real tiny HFPolicy, a real HTTP server, the real OpenAIPolicy client."""

from __future__ import annotations

import asyncio
import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest

from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.base import ActRequest, PolicyTask
from sparring.policy.hf import HFPolicy
from sparring.policy.openai_http import OpenAIPolicy
from sparring.policy.server import PolicyServer
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.pool import SandboxPool
from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore
from sparring.train.model import _CORPUS_TOOLS, build_tiny_model
from tests_support import HANG_S, wait_until

HTTP_S = 120.0  # bounds one request to the local server (a generation on a loaded host), never a speed target

MESSAGES = [
    {"role": "system", "content": "You are a careful software agent."},
    {"role": "user", "content": "Fix clamp in mathx/core.py so that the tests pass."},
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("srv") / "tiny", seed=0, hidden=32, layers=2, heads=4)


@pytest.fixture(scope="module")
def policy(model_dir):
    return HFPolicy(model_dir, max_new_tokens=16, seed=3)


@pytest.fixture(scope="module")
def server(policy):
    with PolicyServer(policy, name="tiny") as srv:
        yield srv


def _client(server, **kw) -> OpenAIPolicy:
    return OpenAIPolicy(server.url, "tiny", timeout_s=HTTP_S, max_retries=0, **kw)


def test_act_over_http_matches_in_process(server, policy, clamp_task):
    async def go():
        client = _client(server, extra_body={"seed": 7})
        try:
            req = ActRequest(
                messages=list(MESSAGES), tools=_CORPUS_TOOLS, task=PolicyTask.of(clamp_task), seed=7
            )
            t0 = time.perf_counter()
            remote = await client.act(req)
            t_http = time.perf_counter() - t0
            t0 = time.perf_counter()
            local = await policy.act(req)
            t_local = time.perf_counter() - t0
            again = await client.act(req)
            return remote, local, again, t_http, t_local
        finally:
            await client.close()

    remote, local, again, t_http, t_local = asyncio.run(go())
    print(f"act latency: http {t_http * 1000:.1f} ms, in-process {t_local * 1000:.1f} ms")
    assert remote.trace is not None and local.trace is not None
    assert len(remote.trace.completion_ids) == len(remote.trace.logprobs or []) > 0
    assert remote.trace.prompt_ids == local.trace.prompt_ids
    assert remote.trace.completion_ids == local.trace.completion_ids
    assert remote.trace.logprobs == pytest.approx(local.trace.logprobs, abs=1e-6)
    assert again.trace is not None and again.trace.completion_ids == remote.trace.completion_ids
    assert remote.message["role"] == "assistant"
    assert remote.message["content"] == local.message["content"]
    assert remote.usage["prompt_tokens"] == len(local.trace.prompt_ids)
    assert remote.usage["total_tokens"] == len(local.trace.prompt_ids) + len(local.trace.completion_ids)


def test_response_shape_and_max_tokens(server):
    body = {"model": "tiny", "messages": MESSAGES, "tools": _CORPUS_TOOLS, "max_tokens": 3, "seed": 1,
            "logprobs": True, "return_token_ids": True}  # fmt: skip
    r = httpx.post(f"{server.url}/chat/completions", json=body, timeout=HTTP_S)
    assert r.status_code == 200
    data = r.json()
    choice = data["choices"][0]
    assert data["object"] == "chat.completion" and data["model"] == "tiny"
    assert choice["finish_reason"] in {"stop", "length", "tool_calls"}
    assert 1 <= len(choice["token_ids"]) <= 3
    assert len(choice["logprobs"]["content"]) == len(choice["token_ids"])
    assert all(isinstance(e["logprob"], float) and e["logprob"] <= 0 for e in choice["logprobs"]["content"])
    assert data["usage"]["completion_tokens"] == len(choice["token_ids"])
    assert isinstance(data["prompt_token_ids"], list) and data["prompt_token_ids"]
    for call in choice["message"].get("tool_calls") or []:
        assert call["type"] == "function" and isinstance(call["function"]["arguments"], str)


def test_health_models_and_errors(server):
    root = server.url
    h = httpx.get(f"{root.removesuffix('/v1')}/health", timeout=HTTP_S)
    assert h.status_code == 200 and h.json()["status"] == "ok" and h.json()["model"] == "tiny"
    assert httpx.get(f"{root}/health", timeout=HTTP_S).status_code == 200
    m = httpx.get(f"{root}/models", timeout=HTTP_S).json()
    assert [d["id"] for d in m["data"]] == ["tiny"]

    bad = httpx.post(f"{root}/chat/completions", content=b"{not json", timeout=HTTP_S,
                     headers={"Content-Type": "application/json"})  # fmt: skip
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "invalid_request_error"
    assert bad.json()["error"]["message"]
    missing = httpx.post(f"{root}/chat/completions", json={"model": "tiny"}, timeout=HTTP_S)
    assert missing.status_code == 400 and "messages" in missing.json()["error"]["message"]
    unknown = httpx.post(
        f"{root}/chat/completions", json={"model": "nope", "messages": MESSAGES}, timeout=HTTP_S
    )
    assert unknown.status_code == 404 and "nope" in unknown.json()["error"]["message"]
    assert httpx.get(f"{root}/nowhere", timeout=HTTP_S).status_code == 404
    neg = httpx.post(
        f"{root}/chat/completions", json={"messages": MESSAGES, "temperature": -1}, timeout=HTTP_S
    )
    assert neg.status_code == 400


def test_health_answers_during_generation(model_dir):
    slow = HFPolicy(model_dir, max_new_tokens=16, seed=0)
    with PolicyServer(slow, name="slow") as srv:
        slow.lock.acquire()  # as a trainer would while updating weights: generation must wait
        try:
            result: dict = {}
            t = threading.Thread(
                target=lambda: result.update(r=httpx.post(f"{srv.url}/chat/completions",
                                                          json={"messages": MESSAGES}, timeout=HTTP_S)),
            )  # fmt: skip
            t.start()
            # the request reaches the server when the loaded host lets it: poll for it, never sleep and hope
            h = wait_until(lambda: _busy(srv.url))
            assert h is not None and h.status_code == 200 and h.json()["busy"] is True
        finally:
            slow.lock.release()
        t.join(timeout=HTTP_S)
        assert result["r"].status_code == 200


def _busy(url: str) -> httpx.Response | None:
    """The health answer once it reports a generation in progress, else None."""
    h = httpx.get(f"{url}/health", timeout=HTTP_S)
    return h if h.status_code != 200 or h.json()["busy"] else None


def test_policy_failure_is_500(model_dir):
    class Broken:
        name = "broken"
        version = 0

        async def act(self, request):
            from sparring.errors import PolicyError

            raise PolicyError("weights on fire")

        async def close(self):
            return None

    with PolicyServer(Broken(), name="b") as srv:
        r = httpx.post(f"{srv.url}/chat/completions", json={"messages": MESSAGES}, timeout=HTTP_S)
        assert r.status_code == 500 and "weights on fire" in r.json()["error"]["message"]


def test_rollout_through_http_stores_traces(server, backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")

    async def go():
        pool = SandboxPool(backend, max_idle=2)
        client = _client(server)
        try:
            sched = RolloutScheduler(pool, PytestJudge(backend), store, concurrency=2, max_steps=2)
            return await sched.run([clamp_task], client, 2)
        finally:
            await client.close()
            await pool.close()

    s = asyncio.run(go())
    assert s.requested == s.stored == 2
    assert set(s.statuses) <= {"ok", "truncated"}, s.statuses
    total, trajs = store.search(TrajQuery(task_id=clamp_task.id))
    assert total == 2
    for summary in trajs:
        t = store.get(summary.id)
        assert t.traces, "every assistant turn over HTTP must keep its tokens"
        for tr in t.traces:
            assert tr.prompt_ids and len(tr.completion_ids) == len(tr.logprobs or ()) > 0
    store.close()


def _read_line(proc: subprocess.Popen, timeout_s: float) -> str:
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None and not sel.select(0):
            break
        if sel.select(min(left, 0.5)):
            chunk = os.read(proc.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
    sel.close()
    return buf.decode().split("\n", 1)[0]


def test_cli_serve_policy_subprocess(model_dir):
    cmd = [sys.executable, "-m", "sparring.cli.main", "serve-policy", "--model", str(model_dir),
           "--port", "0", "--max-new-tokens", "8", "--json"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = _read_line(proc, HANG_S)  # importing torch and loading the model on a loaded host
        assert line, f"no URL printed; stderr: {proc.stderr.read(2000) if proc.poll() is not None else ''}"
        info = json.loads(line)
        assert info["model"] == model_dir.name and info["url"].startswith("http://127.0.0.1:")
        r = httpx.post(f"{info['url']}/chat/completions",
                       json={"model": info["model"], "messages": MESSAGES, "logprobs": True}, timeout=HTTP_S)  # fmt: skip
        assert r.status_code == 200 and r.json()["choices"][0]["message"]["role"] == "assistant"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=HANG_S) == 0  # the timeout bounds a hang only: no speed target
        assert info["url"] in proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=HANG_S)


def test_cli_refuses_remote_host(model_dir):
    r = subprocess.run(
        [sys.executable, "-m", "sparring.cli.main", "serve-policy", "--model", str(model_dir), "--host", "0.0.0.0"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert r.returncode != 0 and "--allow-remote" in r.stderr
    assert len([ln for ln in r.stderr.splitlines() if ln.strip()]) == 1
