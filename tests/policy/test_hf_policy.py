"""HFPolicy on any HF chat model: live weights, batched group sampling, token-in/token-out turns."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from sparring.chat_format import render_chat  # noqa: E402
from sparring.errors import PolicyError  # noqa: E402
from sparring.policy.base import ActRequest, PolicyTask  # noqa: E402
from sparring.policy.hf import HFPolicy  # noqa: E402
from sparring.train.grpo import _Seq, completion_logprobs  # noqa: E402
from sparring.train.model import _CORPUS_TOOLS  # noqa: E402

TOOLS = _CORPUS_TOOLS
MESSAGES = [
    {"role": "system", "content": "You are a careful software agent."},
    {"role": "user", "content": "Fix clamp in mathx/core.py so that the tests pass."},
]


@pytest.fixture(scope="module")
def live(tiny_model_dir):
    """A 'trainer's' model and tokenizer, loaded once: the policy must sample on these very objects."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module")
def hub_policy(hub_model_dir):
    return HFPolicy(hub_model_dir, max_new_tokens=12, seed=0)


def _req(task, messages=MESSAGES, **kw) -> ActRequest:
    return ActRequest(messages=list(messages), tools=TOOLS, task=PolicyTask.of(task), **kw)


def _recomputed(policy: HFPolicy, trace) -> list[float]:
    with torch.no_grad():
        lp, _ = completion_logprobs(
            policy.model, [_Seq(trace.prompt_ids, trace.completion_ids)], policy.pad_id
        )
    return lp[0].tolist()


def test_from_model_samples_on_the_live_weights(live, clamp_task):
    model, tok = live
    model.train()  # as a trainer leaves it
    pol = HFPolicy.from_model(model, tok, max_new_tokens=8, seed=1)
    assert pol.model is model and pol.tokenizer is tok and pol.tool_format == "sparring"
    before = asyncio.run(pol.act(_req(clamp_task)))
    assert model.training, "sampling must put the model back in the mode it found it in"
    with torch.no_grad():  # the trainer updates its weights in place: the policy sees it at once
        for p in model.parameters():
            p.mul_(0.0)
    after = asyncio.run(pol.act(_req(clamp_task)))
    assert after.trace.logprobs != before.trace.logprobs
    # zero weights: every next-token distribution is uniform, so the model's own logprob is -log V
    v = model.config.vocab_size
    assert after.trace.logprobs == pytest.approx(
        [-float(torch.log(torch.tensor(float(v))))] * len(after.trace.logprobs)
    )


def test_a_group_is_one_generate_call(tiny_model_dir, clamp_task):
    pol = HFPolicy(tiny_model_dir, max_new_tokens=10, seed=2)
    group = [_req(clamp_task, seed=5, sample_index=i) for i in range(4)]

    async def concurrent():
        return await asyncio.gather(*(pol.act(r) for r in group))

    n0 = pol.generate_calls
    acts = asyncio.run(concurrent())
    assert pol.generate_calls == n0 + 1, "4 concurrent turns must be coalesced into one generate"
    batch = asyncio.run(pol.act_batch(group))
    assert pol.generate_calls == n0 + 2
    assert [a.trace.completion_ids for a in batch] == [
        a.trace.completion_ids for a in acts
    ]  # same batch, same seed
    assert len({tuple(a.trace.completion_ids) for a in acts}) > 1  # the group's samples differ
    for a in acts:  # the stored logprobs are the model's own, left padding notwithstanding
        assert len(a.trace.logprobs) == len(a.trace.completion_ids) <= 10
        assert _recomputed(pol, a.trace) == pytest.approx(a.trace.logprobs, abs=1e-4)


def _continue(policy, task, first, tool_output="a.py\nb.py"):
    """The conversation after ``first`` plus a tool result, and the next turn's request."""
    msgs = [*MESSAGES, first.message, {"role": "tool", "tool_call_id": "call_0", "content": tool_output}]
    trace = first.trace.placed(0, len(MESSAGES))
    return msgs, _req(task, msgs, traces=[trace], step=1)


@pytest.mark.parametrize("which", ["tiny", "hub"])
def test_next_turn_continues_the_exact_sampled_ids(which, tiny_model_dir, hub_policy, clamp_task):
    pol = hub_policy if which == "hub" else HFPolicy(tiny_model_dir, max_new_tokens=12, seed=0)
    first = asyncio.run(pol.act(_req(clamp_task)))
    msgs, req = _continue(pol, clamp_task, first)
    second = asyncio.run(pol.act(req))
    head = first.trace.prompt_ids + first.trace.completion_ids
    assert second.trace.prompt_ids[: len(head)] == head, "the sampled ids are reused, never re-tokenised"
    assert second.usage["prompt_continued"] == 1 and second.usage["prompt_reencoded"] == 0
    appended = second.trace.prompt_ids[len(head) :]
    text = pol.codec.decode(appended)
    assert "a.py\nb.py" in text and text.endswith(pol.codec.render([{"role": "user", "content": "x"}])[-12:])
    if (
        first.trace.completion_ids[-1] not in pol.stop_ids
    ):  # cut at the limit: the environment closes the turn
        assert appended[0] in pol.stop_ids


def test_hub_model_uses_its_own_template_and_format(hub_policy, hub_model_dir, clamp_task):
    from model_support import QWEN25_TEMPLATE

    assert hub_policy.tool_format == "hermes"
    assert hub_policy.tokenizer.convert_tokens_to_ids("<|im_end|>") in hub_policy.stop_ids
    act = asyncio.run(hub_policy.act(_req(clamp_task)))
    prompt = hub_policy.codec.decode(act.trace.prompt_ids)
    assert prompt == render_chat(QWEN25_TEMPLATE, MESSAGES, TOOLS)
    assert "<|im_start|>assistant\n" in prompt and "<tool_call>" in prompt
    # a Hermes call the model would write is parsed from its ids into the OpenAI message
    ids = hub_policy.codec.encode(
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>'
    )
    parsed = hub_policy.codec.parse(ids, TOOLS)
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("bash", {"command": "ls"})]


def test_a_template_that_cannot_show_tools_gets_them_in_the_system_prompt(hub_model_dir, tmp_path):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(hub_model_dir, d)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(d)
    tok.chat_template = "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(d)
    with pytest.warns(UserWarning, match="cannot show tools.*hf:PATH#FORMAT"):
        pol = HFPolicy(d)
    assert pol.tool_format == "hermes"
    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    text = pol.codec.render([*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [call]}], TOOLS)
    assert text.startswith("<system>") and '"name": "bash"' in text.split("<user>")[0]  # the schemas
    assert '<assistant><tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>' in text
    with pytest.warns(UserWarning):
        assert HFPolicy(d, tool_format="llama3_json").tool_format == "llama3_json"
    with pytest.raises(PolicyError, match="needs Sparring's chat template"):
        HFPolicy(d, tool_format="sparring")


def test_a_template_with_tools_in_an_unknown_format_names_the_spec_spelling(hub_model_dir, tmp_path):
    import shutil

    d = tmp_path / "m"
    shutil.copytree(hub_model_dir, d)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(d)
    tok.chat_template = "{{ tools }}{% for m in messages %}{{ m['content'] }}{% endfor %}"
    tok.save_pretrained(d)
    with pytest.raises(PolicyError, match=r"hf:PATH#FORMAT .*model.tool_format"):
        HFPolicy(d)
    assert HFPolicy(d, tool_format="llama3_json").tool_format == "llama3_json"


def test_sft_pairs_are_in_the_model_s_own_template(tiny_model_dir, hub_policy):
    from sparring.train.grpo import sft_examples

    call = {"id": "c", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    msgs = [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c", "content": "a.py"}, {"role": "assistant", "content": "Done."}]  # fmt: skip
    tiny = HFPolicy(tiny_model_dir, max_new_tokens=4)
    assert tiny.codec.sft_pairs(msgs, TOOLS) == sft_examples(msgs, TOOLS)  # Sparring's: the same text
    pairs = hub_policy.codec.sft_pairs(msgs, TOOLS)
    assert [c for _, c in pairs] == [
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call><|im_end|>',
        "Done.<|im_end|>",
    ]
    assert pairs[0][0].endswith("<|im_start|>assistant\n")


def test_hf_spec_names_the_tool_format(hub_model_dir):
    from sparring.policy.spec import make_policy

    assert make_policy(f"hf:{hub_model_dir}").tool_format == "hermes"
    assert make_policy(f"hf:{hub_model_dir}#qwen3_coder").tool_format == "qwen3_coder"


def test_coalescing_survives_cancelled_callers_and_small_batches(tiny_model_dir, clamp_task):
    pol = HFPolicy(tiny_model_dir, max_new_tokens=4, seed=2, max_batch=2)
    reqs = [_req(clamp_task, sample_index=i) for i in range(3)]

    async def go():
        tasks = [asyncio.create_task(pol.act(r)) for r in reqs]
        gone = asyncio.create_task(pol.act(reqs[0]))
        gone.cancel()  # a caller that gives up (a turn time limit) before its turn is sampled
        done = await asyncio.gather(*tasks)
        with pytest.raises(asyncio.CancelledError):
            await gone
        return done, await asyncio.wait_for(pol.act(reqs[1]), 120)  # the queue still works afterwards

    n0 = pol.generate_calls
    done, after = asyncio.run(go())
    assert all(a.trace.completion_ids for a in [*done, after])
    assert pol.generate_calls == n0 + 3  # 3 turns in batches of at most 2, then the last one
