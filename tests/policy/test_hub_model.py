"""A hub-format model (random Qwen2, Qwen2.5 template, Hermes tool calls) end to end, and serve-policy
replies as the official ``openai`` client reads them (n > 1, top_logprobs, tool calls).

To get a real tool call out of a random model, the served model is first
taught one turn (a few SFT steps on a Hermes call for a short prompt, then
greedy sampling): the call travels model ids -> Hermes text -> parser -> HTTP
reply -> openai client. The rollouts run the hub model on a real task through
``hf:`` and through serve-policy + ``openai:`` (random turns: no call expected).
"""

from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("torch")
openai = pytest.importorskip("openai")

from sparring.judge.pytest_judge import PytestJudge  # noqa: E402
from sparring.policy.base import Action, ActRequest  # noqa: E402
from sparring.policy.hf import HFPolicy  # noqa: E402
from sparring.policy.openai_http import OpenAIPolicy  # noqa: E402
from sparring.policy.server import PolicyServer  # noqa: E402
from sparring.policy.spec import make_policy  # noqa: E402
from sparring.rollout.scheduler import RolloutScheduler  # noqa: E402
from sparring.sandbox.pool import SandboxPool  # noqa: E402
from sparring.store.base import TrajQuery  # noqa: E402
from sparring.store.sqlite import SQLiteStore  # noqa: E402
from sparring.store.tokens import episode_tokens  # noqa: E402
from sparring.train.grpo import SFTTrainer  # noqa: E402
from sparring.train.model import _CORPUS_TOOLS  # noqa: E402

HTTP_S = 120.0
TOOLS = _CORPUS_TOOLS
MESSAGES = [
    {"role": "system", "content": "You are a careful software agent."},
    {"role": "user", "content": "Fix clamp in mathx/core.py so that the tests pass."},
]
CALL = {"name": "bash", "arguments": {"command": "ls"}}


@pytest.fixture(scope="module")
def taught_dir(hub_model_dir, tmp_path_factory):
    """The hub model after a few SFT steps on one Hermes tool call for MESSAGES (saved: loadable as hf:PATH)."""
    pol = HFPolicy(hub_model_dir, max_new_tokens=24, temperature=0.0)
    completion = f"<tool_call>\n{json.dumps(CALL)}\n</tool_call><|im_end|>"
    sft = SFTTrainer(pol, lr=1e-2)
    example = [(pol.codec.render(MESSAGES), completion)]
    for _ in range(80):
        if sft.step(example)["sft/loss"] < 0.02:
            break
    return pol.save(tmp_path_factory.mktemp("taught") / "qwen")


@pytest.fixture(scope="module")
def server(taught_dir):
    with PolicyServer(HFPolicy(taught_dir, max_new_tokens=24, temperature=0.0), name="qwen") as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="none", timeout=HTTP_S, max_retries=0)


def test_openai_client_reads_tool_calls(client):
    r = client.chat.completions.create(model="qwen", messages=MESSAGES, seed=0)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    (call,) = choice.message.tool_calls
    assert call.type == "function" and call.id and call.function.name == "bash"
    assert json.loads(call.function.arguments) == CALL["arguments"]
    assert (
        r.usage.completion_tokens > 0
        and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    )


def test_openai_client_reads_n_choices_with_top_logprobs(client):
    r = client.chat.completions.create(
        model="qwen", messages=MESSAGES, tools=TOOLS, n=3, temperature=1.0, logprobs=True, top_logprobs=2, seed=1,
        extra_body={"return_token_ids": True},
    )  # fmt: skip
    assert [c.index for c in r.choices] == [0, 1, 2]
    for c in r.choices:
        entries = c.logprobs.content
        assert entries and len(entries) == len(c.model_extra["token_ids"])
        for e in entries:
            assert len(e.top_logprobs) == 2 and e.top_logprobs[0].logprob >= e.top_logprobs[1].logprob
            assert e.logprob <= e.top_logprobs[0].logprob + 1e-6
    assert r.usage.completion_tokens == sum(len(c.logprobs.content) for c in r.choices)


def test_unsupported_requests_are_400_never_empty(client):
    for bad in ({"n": 0}, {"n": 65}, {"top_logprobs": 2}, {"logprobs": True, "top_logprobs": 21}):
        with pytest.raises(openai.BadRequestError):
            client.chat.completions.create(model="qwen", messages=MESSAGES, **bad)


class Scripted:
    """A non-model policy: always one bash call (the server drives it through act())."""

    name = "scripted"
    version = 0

    async def act(self, request: ActRequest) -> Action:
        call = {"id": f"call_{request.sample_index}", "type": "function",
                "function": {"name": "bash", "arguments": json.dumps({"command": "ls"})}}  # fmt: skip
        return Action(message={"role": "assistant", "content": "", "tool_calls": [call]})

    async def close(self) -> None:
        return None


def test_a_policy_without_logprobs_honours_n_and_refuses_top_logprobs():
    with PolicyServer(Scripted(), name="s") as srv:
        c = openai.OpenAI(base_url=srv.url, api_key="none", timeout=HTTP_S, max_retries=0)
        r = c.chat.completions.create(model="s", messages=MESSAGES, n=2)
        assert [ch.message.tool_calls[0].id for ch in r.choices] == ["call_0", "call_1"]
        with pytest.raises(openai.BadRequestError, match="top_logprobs"):
            c.chat.completions.create(model="s", messages=MESSAGES, logprobs=True, top_logprobs=1)


def _rollout(backend, task, policy, store_path):
    async def go():
        pool = SandboxPool(backend, max_idle=2)
        try:
            sched = RolloutScheduler(
                pool, PytestJudge(backend), SQLiteStore(store_path), concurrency=2, max_steps=2
            )
            return await sched.run([task], policy, 2)
        finally:
            await policy.close()
            await pool.close()

    summary = asyncio.run(go())
    assert summary.requested == summary.stored == 2 and set(summary.statuses) <= {"ok", "truncated"}, summary
    store = SQLiteStore(store_path, readonly=True)
    trajs = [store.get(t.id) for t in store.search(TrajQuery(task_id=task.id))[1]]
    store.close()
    return trajs


def test_hub_model_rolls_out_through_hf_spec(hub_model_dir, backend, clamp_task, tmp_path):
    policy = make_policy(f"hf:{hub_model_dir}", max_new_tokens=16)
    assert isinstance(policy, HFPolicy) and policy.tool_format == "hermes"
    for t in _rollout(backend, clamp_task, policy, tmp_path / "hf.db"):
        assert len(t.traces) == 2 and t.messages[2]["role"] == "assistant"
        assert episode_tokens(t).mismatches == 0  # token-in/token-out on a hub template too


@pytest.mark.slow
def test_hub_model_rolls_out_through_serve_policy_and_openai(server, backend, clamp_task, tmp_path):
    policy = make_policy(f"openai:{server.url}#qwen", timeout_s=HTTP_S, max_retries=0)
    assert isinstance(policy, OpenAIPolicy)
    for t in _rollout(backend, clamp_task, policy, tmp_path / "oa.db"):
        assert len(t.traces) == 2
        for tr in t.traces:  # the server's token ids and logprobs came back over HTTP
            assert tr.prompt_ids and len(tr.completion_ids) == len(tr.logprobs or ()) > 0
