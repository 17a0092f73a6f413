"""HFPolicy's own random stream per request, its context policy, and cancellation (tiny model, CPU)."""

from __future__ import annotations

import asyncio
import threading

import pytest

torch = pytest.importorskip("torch")

from sparring.errors import PolicyError  # noqa: E402
from sparring.policy.base import ActRequest, PolicyTask  # noqa: E402
from sparring.policy.hf import HFPolicy, droppable_turns  # noqa: E402
from sparring.train.model import _CORPUS_TOOLS  # noqa: E402
from tests_support import HANG_S, await_until  # noqa: E402

TOOLS = _CORPUS_TOOLS
INSTRUCTION = "Fix clamp in mathx/core.py so that the tests pass."
MESSAGES = [
    {"role": "system", "content": "You are a careful software agent."},
    {"role": "user", "content": INSTRUCTION},
]


@pytest.fixture(scope="module")
def policy(tiny_model_dir):
    return HFPolicy(tiny_model_dir, max_new_tokens=10, temperature=1.0, top_p=0.9, seed=3)


def _req(task, **kw) -> ActRequest:
    return ActRequest(messages=list(MESSAGES), tools=TOOLS, task=PolicyTask.of(task), **kw)


def test_a_request_samples_the_same_tokens_alone_or_in_any_batch(policy, clamp_task):
    reqs = [_req(clamp_task, seed=s, sample_index=i, step=0) for s, i in ((0, 0), (0, 1), (7, 0), (7, 2))]
    alone = [policy.generate_turns([r])[0].trace.completion_ids for r in reqs]
    batched = [a.trace.completion_ids for a in policy.generate_turns(reqs)]
    reordered = [a.trace.completion_ids for a in policy.generate_turns(reqs[::-1])][::-1]
    assert alone == batched == reordered
    assert len({tuple(x) for x in alone}) > 1, "different requests must get different random streams"


def test_prompts_of_different_lengths_sample_the_same_alone_or_left_padded_together(policy, clamp_task):
    reqs = [
        ActRequest(messages=[*MESSAGES[:1], {"role": "user", "content": INSTRUCTION + " Quickly." * k}],
                   tools=TOOLS, task=PolicyTask.of(clamp_task), seed=2)
        for k in (0, 3, 11)
    ]  # fmt: skip
    assert len({len(policy.encode_prompt(r.messages, r.tools).ids) for r in reqs}) == 3
    alone = [policy.generate_turns([r])[0].trace for r in reqs]
    together = [a.trace for a in policy.generate_turns(reqs)]
    assert [t.completion_ids for t in alone] == [t.completion_ids for t in together]
    for a, b in zip(alone, together, strict=True):  # the logprobs agree to float noise
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-4


def test_concurrent_acts_sample_what_they_sample_alone(policy, clamp_task):
    """Which turns share a generate call (timing) does not change a sample: the #36 reproducibility bug."""
    reqs = [_req(clamp_task, seed=1, sample_index=i) for i in range(3)]

    async def together():
        return await asyncio.gather(*(policy.act(r) for r in reqs))

    calls = policy.generate_calls
    joint = [a.trace.completion_ids for a in asyncio.run(together())]
    assert policy.generate_calls == calls + 1  # they did share one call
    assert joint == [policy.generate_turns([r])[0].trace.completion_ids for r in reqs]


def test_a_long_episode_keeps_the_instruction_and_the_tools(policy, clamp_task):
    msgs = list(MESSAGES)
    for k in range(40):
        call = {
            "id": f"c{k}",
            "type": "function",
            "function": {"name": "bash", "arguments": '{"command": "ls"}'},
        }
        msgs += [{"role": "assistant", "content": f"step {k}", "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"c{k}", "content": "a.py b.py " * 20}]  # fmt: skip
    full = len(policy.codec.prompt_ids(msgs, TOOLS))
    small = HFPolicy.from_model(policy.model, policy.tokenizer, max_prompt_tokens=full // 3, max_new_tokens=4)
    prompt = small.encode_prompt(msgs, TOOLS)
    text = small.codec.decode(prompt.ids)
    assert prompt.dropped > 0 and len(prompt.ids) <= full // 3
    assert INSTRUCTION in text and "You are a careful software agent." in text
    assert all(t["function"]["name"] in text for t in TOOLS)  # the tool schemas stay
    assert "step 39" in text and "step 0" not in text  # the oldest middle turns went first
    assert text.count("<tool_call>") - 1 == text.count(
        "<|tool|>"
    )  # no result without its call (1: the system's example)


def test_droppable_turns_never_include_the_head_or_the_last_turn():
    roles = ["system", "user", "assistant", "tool", "tool", "assistant", "tool", "user", "assistant", "tool"]
    msgs = [{"role": r} for r in roles]
    assert droppable_turns(msgs) == [(2, 5), (5, 8)]
    assert droppable_turns(msgs[:4]) == []
    notes = [{"role": r} for r in ["system", "user", "user", "user", "assistant", "tool", "user"]]
    assert droppable_turns(notes) == [(2, 3), (3, 4)]  # a note after a note is its own turn; the last is kept


def test_a_cancelled_generation_stops_and_frees_the_model(tiny_model_dir, clamp_task):
    """Counted in forward passes (one per token), not in seconds: a loaded host slows both alike."""
    pol = HFPolicy(tiny_model_dir, max_new_tokens=1500, max_prompt_tokens=400, temperature=1.0)
    pol.stop_ids = frozenset({pol.tokenizer.vocab_size + 7})  # no stop token: it would run all 1500 tokens
    req = _req(clamp_task)
    cancel = threading.Event()
    seen = {"forwards": 0, "cancel_at": 20}

    def count(_module, _args):
        seen["forwards"] += 1
        if seen["forwards"] == seen["cancel_at"]:
            threading.Thread(target=cancel.set).start()  # the caller gives up mid-generation

    hook = pol.model.register_forward_pre_hook(count)
    try:
        with pytest.raises(PolicyError, match="cancelled"):
            pol.generate_turns([req], cancel=cancel)
        assert 20 <= seen["forwards"] < 1500, seen  # stopped long before 1500 tokens

        async def gives_up():
            seen.update(forwards=0, cancel_at=0)
            act = asyncio.ensure_future(pol.act(req))
            assert await await_until(lambda: seen["forwards"] >= 5), "the generation never started"
            act.cancel()  # a caller that gives up while its turn is being generated
            with pytest.raises(asyncio.CancelledError):
                await act

        asyncio.run(gives_up())
        assert pol.lock.acquire(timeout=HANG_S), "the model's lock is still held"
        pol.lock.release()
        assert seen["forwards"] < 1500, seen  # it stopped at the cancel, not at the end
    finally:
        hook.remove()
