"""The local model path end to end on CPU: build a tiny model, sample turns, GRPO and SFT updates."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
import torch  # noqa: E402  (the [train] extra is part of `make test`: a missing torch must fail, not skip)
import transformers  # noqa: E402, F401

from sparring.chat_format import render_assistant, render_prompt  # noqa: E402
from sparring.errors import PolicyError  # noqa: E402
from sparring.policy.base import ActRequest, Policy, PolicyTask  # noqa: E402
from sparring.policy.hf import HFPolicy  # noqa: E402
from sparring.train.grpo import GRPOConfig, GRPOTrainer, SFTTrainer, _Seq, completion_logprobs, sft_examples  # noqa: E402
from sparring.train.losses import LOSSES, dapo, dr_grpo, get_loss, grpo  # noqa: E402
from sparring.train.model import _CORPUS_TOOLS, build_tiny_model  # noqa: E402
from sparring.trajectory import TokenTrace, Trajectory  # noqa: E402

TOOLS = _CORPUS_TOOLS
MESSAGES = [
    {"role": "system", "content": "You are a careful software agent."},
    {"role": "user", "content": "Fix clamp in mathx/core.py so that the tests pass."},
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0, hidden=32, layers=2, heads=4)


@pytest.fixture(scope="module")
def policy(model_dir):
    return HFPolicy(model_dir, max_new_tokens=24, seed=1)


def _request(task, **kw) -> ActRequest:
    return ActRequest(messages=list(MESSAGES), tools=TOOLS, task=PolicyTask.of(task), **kw)


def _traj(status: str, reward: float, traces: list[TokenTrace], group: str = "g", **kw) -> Trajectory:
    return Trajectory(
        task_id="t", task_digest="d", policy="hf:test", status=status, reward=reward, group_id=group,
        traces=traces, **kw,
    )  # fmt: skip


def _trace(policy: HFPolicy, completion_text: str) -> TokenTrace:
    """A TokenTrace for a fixed completion, with its current logprobs as the 'old' ones."""
    prompt = policy.tokenizer.encode(render_prompt(MESSAGES, TOOLS), add_special_tokens=False)
    completion = policy.tokenizer.encode(completion_text, add_special_tokens=False)
    with torch.no_grad():
        lp, _ = completion_logprobs(policy.model, [_Seq(prompt, completion)], policy.tokenizer.pad_token_id)
    return TokenTrace(prompt_ids=prompt, completion_ids=completion, logprobs=lp[0].tolist())


def _mean_logprob(policy: HFPolicy, trace: TokenTrace) -> float:
    with torch.no_grad():
        lp, mask = completion_logprobs(
            policy.model, [_Seq(trace.prompt_ids, trace.completion_ids)], policy.tokenizer.pad_token_id
        )
    return float(lp.sum() / mask.sum())


GOOD = render_assistant({"role": "assistant", "content": "", "tool_calls": [
    {"id": "c", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": "pytest -q"})}}
]})  # fmt: skip
BAD = render_assistant({"role": "assistant", "content": "I give up, this cannot be fixed."})


# --------------------------------------------------------------------------- the model directory


def test_model_dir_loads_offline_with_auto_classes(model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    assert model.config.max_position_embeddings >= 2048
    for marker in ("<|system|>", "<|user|>", "<|assistant|>", "<|tool|>", "<|end|>", "<tool_call>"):
        ids = tok.encode(marker, add_special_tokens=False)
        assert len(ids) == 1, marker
    text = render_prompt(MESSAGES, TOOLS) + GOOD
    assert tok.decode(tok.encode(text, add_special_tokens=False), skip_special_tokens=False) == text


def test_import_of_hf_policy_is_cheap():
    code = "import sys, sparring.policy.hf; sys.exit(int('torch' in sys.modules or 'transformers' in sys.modules))"
    assert subprocess.run([sys.executable, "-c", code], timeout=300).returncode == 0


# --------------------------------------------------------------------------- sampling


def test_act_returns_message_and_trace(policy, clamp_task):
    assert isinstance(policy, Policy)
    assert policy.name.startswith("hf:")
    action = asyncio.run(policy.act(_request(clamp_task)))
    trace = action.trace
    assert trace is not None and trace.prompt_ids and trace.completion_ids
    assert len(trace.logprobs) == len(trace.completion_ids) <= policy.max_new_tokens
    assert all(lp <= 0.0 for lp in trace.logprobs)
    assert action.message["role"] == "assistant" and isinstance(action.message["content"], str)
    assert action.usage["completion_tokens"] == len(trace.completion_ids)
    # the stored logprobs are the model's own (temperature 1) scores of the sampled tokens
    recomputed = completion_logprobs(
        policy.model, [_Seq(trace.prompt_ids, trace.completion_ids)], policy.tokenizer.pad_token_id
    )[0][0]
    assert recomputed.tolist() == pytest.approx(trace.logprobs, abs=1e-4)


def test_same_seed_same_output_different_sample_different(policy, clamp_task):
    async def both():
        a = await policy.act(_request(clamp_task, seed=3, sample_index=1, step=2))
        b = await policy.act(_request(clamp_task, seed=3, sample_index=1, step=2))
        others = await asyncio.gather(
            *(policy.act(_request(clamp_task, seed=3, sample_index=i)) for i in range(4))
        )
        return a, b, others

    a, b, others = asyncio.run(both())
    assert a.trace == b.trace and a.message == b.message
    assert len({tuple(o.trace.completion_ids) for o in others}) > 1


def test_long_prompt_is_left_truncated_keeping_system(model_dir, clamp_task):
    pol = HFPolicy(model_dir, max_new_tokens=4, max_prompt_tokens=256)
    long = [MESSAGES[0]] + [{"role": "user", "content": f"note {i}: " + "word " * 60} for i in range(10)]
    action = asyncio.run(pol.act(ActRequest(messages=long, tools=[], task=PolicyTask.of(clamp_task))))
    assert len(action.trace.prompt_ids) <= 256
    assert action.usage["messages_dropped"] > 0
    text = pol.tokenizer.decode(action.trace.prompt_ids, skip_special_tokens=False)
    assert text.startswith("<|system|>\nYou are a careful software agent.") and "note 9:" in text


def test_bad_paths_raise_policy_error(tmp_path):
    with pytest.raises(PolicyError, match="not found"):
        HFPolicy(tmp_path / "missing")
    with pytest.raises(PolicyError, match="not a model directory"):
        HFPolicy(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "tokenizer.json").write_text("{}")
    with pytest.raises(PolicyError) as e:
        HFPolicy(tmp_path)
    assert "\n" not in str(e.value)


# --------------------------------------------------------------------------- losses


def test_losses_registry_and_normalisers():
    assert set(LOSSES) == {"grpo", "dr_grpo", "dapo"} and get_loss("dapo") is dapo
    new = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -2.0])
    # ratio 1: per-token loss is -A
    assert float(grpo(new, new, adv, mask).loss) == pytest.approx((-1.0 + 2.0) / 2)
    assert float(dapo(new, new, adv, mask).loss) == pytest.approx((-3.0 + 2.0) / 4)
    assert float(dr_grpo(new, new, adv, mask, max_tokens=10).loss) == pytest.approx((-3.0 + 2.0) / (2 * 10))


def test_clipping_is_asymmetric_for_dapo():
    old = torch.zeros(1, 1)
    mask = torch.ones(1, 1)
    new = torch.log(torch.tensor([[1.25]]))  # ratio 1.25: above 1.2, below 1.28
    adv = torch.tensor([1.0])
    assert grpo(new, old, adv, mask).clip_frac == 1.0
    assert dapo(new, old, adv, mask).clip_frac == 0.0
    assert float(grpo(new, old, adv, mask).loss) == pytest.approx(-1.2)
    assert float(dapo(new, old, adv, mask).loss) == pytest.approx(-1.25)


def test_kl_term_is_zero_at_the_reference_and_positive_away():
    ref = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    adv = torch.zeros(1)
    assert grpo(ref, ref, adv, mask, ref_logprobs=ref, kl_coef=0.1).kl == pytest.approx(0.0)
    out = grpo(ref - 0.5, ref - 0.5, adv, mask, ref_logprobs=ref, kl_coef=0.1)
    assert out.kl > 0 and float(out.loss) > 0


# --------------------------------------------------------------------------- GRPO


def test_grpo_step_raises_the_rewarded_completion(model_dir):
    pol = HFPolicy(model_dir, max_new_tokens=24)
    good, bad = _trace(pol, GOOD), _trace(pol, BAD)
    before = _mean_logprob(pol, good) - _mean_logprob(pol, bad)
    weights = [p.detach().clone() for p in pol.model.parameters()]
    trainer = GRPOTrainer(pol, GRPOConfig(lr=1e-3))
    metrics = trainer.step([_traj("ok", 1.0, [good]), _traj("ok", 0.0, [bad])])
    assert metrics["train/skipped"] == 0.0
    assert metrics["train/trajectories"] == 2 and metrics["train/frac_zero_std_groups"] == 0.0
    assert metrics["train/tokens"] == len(good.completion_ids) + len(bad.completion_ids)
    assert metrics["train/grad_norm"] > 0 and 0.0 <= metrics["train/clip_frac"] <= 1.0
    assert all(k.startswith("train/") and isinstance(v, float) for k, v in metrics.items())
    assert any(not torch.equal(w, p) for w, p in zip(weights, pol.model.parameters(), strict=True))
    assert pol.version == 1
    after = _mean_logprob(pol, good) - _mean_logprob(pol, bad)
    assert after > before


@pytest.mark.parametrize("loss", ["dr_grpo", "dapo"])
def test_other_loss_variants_step_with_kl(model_dir, loss):
    pol = HFPolicy(model_dir, max_new_tokens=24)
    good, bad = _trace(pol, GOOD), _trace(pol, BAD)
    trainer = GRPOTrainer(
        pol, GRPOConfig(lr=1e-3, loss=loss, kl_coef=0.05, normalize_std=False, micro_batch_tokens=64)
    )
    metrics = trainer.step([_traj("ok", 1.0, [good]), _traj("truncated", 0.0, [bad])])
    assert metrics["train/skipped"] == 0.0 and metrics["train/kl"] >= 0.0
    assert metrics["train/loss"] == metrics["train/loss"]  # not NaN


def test_untrainable_statuses_are_skipped(model_dir):
    pol = HFPolicy(model_dir, max_new_tokens=24)
    good, bad = _trace(pol, GOOD), _trace(pol, BAD)
    weights = [p.detach().clone() for p in pol.model.parameters()]
    trainer = GRPOTrainer(pol, GRPOConfig(lr=1e-3))
    # only infra/judge/policy errors carry the contrast: nothing may be learnt from them
    batch = [
        _traj("ok", 1.0, [good]),
        _traj("infra_error", 0.0, [bad]),
        _traj("judge_error", 0.0, [bad]),
        _traj("policy_error", 0.0, [bad]),
    ]
    metrics = trainer.step(batch)
    assert metrics["train/skipped_untrainable"] == 3.0
    assert metrics["train/skipped"] == 1.0 and metrics["train/trajectories"] == 0.0
    assert all(torch.equal(w, p) for w, p in zip(weights, pol.model.parameters(), strict=True))
    assert pol.version == 0


def test_batch_without_signal_is_skipped_not_crashed(model_dir):
    pol = HFPolicy(model_dir, max_new_tokens=24)
    good = _trace(pol, GOOD)
    trainer = GRPOTrainer(pol, GRPOConfig())
    batch = [_traj("ok", 1.0, [good], "a"), _traj("ok", 1.0, [good], "a"), _traj("ok", 0.0, [good], "b")]
    metrics = trainer.step(batch)
    assert metrics["train/skipped"] == 1.0 and metrics["train/frac_zero_std_groups"] == 1.0
    assert trainer.step([])["train/skipped"] == 1.0
    assert pol.version == 0


def test_grpo_on_sampled_trajectories(model_dir, clamp_task):
    pol = HFPolicy(model_dir, max_new_tokens=12)
    actions = [asyncio.run(pol.act(_request(clamp_task, sample_index=i))) for i in range(3)]
    batch = [_traj("ok", float(i == 0), [a.trace]) for i, a in enumerate(actions)]
    metrics = GRPOTrainer(pol, GRPOConfig(lr=1e-4)).step(batch)
    assert metrics["train/skipped"] == 0.0 and metrics["train/turns"] == 3.0
    # fresh samples: the stored logprobs match the current weights, so nothing was clipped
    assert metrics["train/clip_frac"] == 0.0


# --------------------------------------------------------------------------- SFT


def test_sft_examples_from_a_trajectory():
    msgs = [*MESSAGES, {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    ]}, {"role": "tool", "tool_call_id": "call_0", "content": "mathx"},
        {"role": "assistant", "content": "done"}]  # fmt: skip
    traj = _traj("ok", 1.0, [], messages=msgs)
    pairs = sft_examples(traj, TOOLS)
    assert [c for _, c in pairs] == [render_assistant(msgs[2]), render_assistant(msgs[4])]
    assert pairs[0][0] == render_prompt(msgs[:2], TOOLS) and pairs[1][0] == render_prompt(msgs[:4], TOOLS)


def test_sft_steps_lower_the_loss(model_dir, tmp_path):
    pol = HFPolicy(model_dir, max_new_tokens=24)
    example = [(render_prompt(MESSAGES, TOOLS), GOOD)]
    sft = SFTTrainer(pol, lr=3e-3)
    first = sft.evaluate(example)
    losses = [sft.step(example)["sft/loss"] for _ in range(10)]
    assert losses[0] == pytest.approx(first, rel=1e-4)
    assert sft.evaluate(example) < first - 0.5
    assert pol.version == 10
    # the trained weights round-trip through save()
    saved = HFPolicy(pol.save(tmp_path / "saved"), max_new_tokens=24)
    assert SFTTrainer(saved).evaluate(example) == pytest.approx(sft.evaluate(example), rel=1e-4)


def test_greedy_and_top_p_sampling(model_dir, clamp_task):
    greedy = HFPolicy(model_dir, max_new_tokens=8, temperature=0.0)
    a = asyncio.run(greedy.act(_request(clamp_task, sample_index=0)))
    b = asyncio.run(greedy.act(_request(clamp_task, sample_index=5)))
    assert a.trace == b.trace  # greedy ignores the seed
    nucleus = HFPolicy(model_dir, max_new_tokens=8, top_p=0.3)
    c = asyncio.run(nucleus.act(_request(clamp_task)))
    assert len(c.trace.logprobs) == len(c.trace.completion_ids)
