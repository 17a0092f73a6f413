"""Loss math against hand-computed values, masking, accumulation and the staleness / status rules."""

from __future__ import annotations

import math

import pytest
import torch

from sparring.policy.hf import HFPolicy
from sparring.train.grpo import GRPOConfig, GRPOTrainer, _Seq, completion_logprobs
from sparring.train.losses import dapo, dr_grpo, grpo
from sparring.train.model import build_tiny_model
from sparring.trajectory import TokenTrace, Trajectory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, hidden=32, layers=1, heads=4)


def test_clipped_surrogate_by_hand():
    # token ratios 1.5 (above 1+eps), 0.5 (below 1-eps), 1.1 (inside), advantages +1 / -1
    old = torch.zeros(2, 3)
    new = torch.log(torch.tensor([[1.5, 0.5, 1.1], [1.5, 0.5, 1.1]]))
    adv = torch.tensor([1.0, -1.0])
    mask = torch.ones(2, 3)
    # A=+1: min(r, clip(r)) = [1.2, 0.5, 1.1] -> loss terms [-1.2, -0.5, -1.1]
    # A=-1: min(-r, -clip(r)) = [-1.5, -0.8, -1.1] -> loss terms [1.5, 0.8, 1.1]
    out = grpo(new, old, adv, mask, eps_low=0.2, eps_high=0.2)
    seq1, seq2 = (-1.2 - 0.5 - 1.1) / 3, (1.5 + 0.8 + 1.1) / 3
    assert float(out.loss) == pytest.approx((seq1 + seq2) / 2, abs=1e-6)
    # clipped tokens: seq 1 token 0 (1.5 capped), seq 2 token 1 (0.5 raised to 0.8): 2 of 6
    assert out.clip_frac == pytest.approx(2 / 6)
    assert out.weight == 2.0 and out.tokens == 6


def test_normalisers_weigh_unequal_lengths_differently():
    new = old = torch.zeros(2, 4)
    adv = torch.tensor([1.0, 1.0])
    mask = torch.tensor([[1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 0.0, 0.0]])
    # per-token loss -1 everywhere (ratio 1)
    assert float(grpo(new, old, adv, mask).loss) == pytest.approx(-1.0)  # mean of per-seq means
    assert float(dapo(new, old, adv, mask).loss) == pytest.approx(-5 / 5)  # token mean
    assert float(dr_grpo(new, old, adv, mask, max_tokens=8).loss) == pytest.approx(-5 / (2 * 8))
    adv2 = torch.tensor([1.0, -1.0])
    assert float(grpo(new, old, adv2, mask).loss) == pytest.approx(0.0)  # each sequence counts once
    assert float(dapo(new, old, adv2, mask).loss) == pytest.approx((-4 + 1) / 5)  # each token counts once


def test_k3_kl_by_hand():
    new = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    d = math.log(0.25) - math.log(0.5)
    expected = math.exp(d) - d - 1  # 0.5 + ln 2 - 1
    out = grpo(new, new, torch.zeros(1), torch.ones(1, 1), ref_logprobs=ref, kl_coef=0.5)
    assert out.kl == pytest.approx(expected)
    assert float(out.loss) == pytest.approx(0.5 * expected)


def test_masked_positions_never_matter():
    new = torch.tensor([[0.1, 9.0]], requires_grad=True)
    old = torch.zeros(1, 2)
    mask = torch.tensor([[1.0, 0.0]])
    out = dapo(new, old, torch.tensor([2.0]), mask)
    out.loss.backward()
    assert new.grad is not None and new.grad[0, 1] == 0.0 and new.grad[0, 0] != 0.0


def test_no_gradient_flows_through_prompt_and_tool_output_tokens(model_dir):
    """The loss reads only completion positions: logits at prompt / tool-output positions get zero gradient."""
    pol = HFPolicy(model_dir, max_new_tokens=8)
    seq = _Seq(prompt_ids=[5, 6, 7, 8, 9, 10], completion_ids=[11, 12, 13], advantage=1.0)
    captured = {}

    class Spy(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, **kw):
            out = self.inner(**kw)
            out.logits.retain_grad()
            captured["logits"] = out.logits
            return out

    lp, mask = completion_logprobs(Spy(pol.model), [seq], pad_id=0)
    old = lp.detach()
    grpo(lp, old, torch.tensor([1.0]), mask).loss.backward()
    g = captured["logits"].grad[0].abs().sum(-1)
    P = len(seq.prompt_ids)
    # logits at positions P-1 .. P+1 predict the completion; positions 0..P-2 predict prompt / tool tokens
    assert torch.all(g[: P - 1] == 0)
    assert torch.all(g[P - 1 : P + 2] > 0)
    assert g[P + 2 :].sum() == 0


def _traj(reward, trace, status="ok", group="g", version=0):
    return Trajectory(task_id="t", task_digest="d", policy="p", status=status, reward=reward, group_id=group,
                      traces=[trace], policy_version=version)  # fmt: skip


def _trace(pol, prompt, completion):
    with torch.no_grad():
        lp, _ = completion_logprobs(pol.model, [_Seq(prompt, completion)], 0)
    return TokenTrace(
        prompt_ids=prompt, completion_ids=completion, logprobs=lp[0, : len(completion)].tolist()
    )


def _batch(pol):
    return [
        _traj(1.0, _trace(pol, [5, 6, 7], [20, 21, 22, 23])),
        _traj(0.0, _trace(pol, [5, 6, 7], [30, 31])),
        _traj(0.5, _trace(pol, [5, 6, 8, 9], [40, 41, 42])),
    ]


def test_gradient_accumulation_equals_one_big_batch(model_dir):
    states = []
    for budget in (4096, 8):  # one micro-batch vs one sequence per micro-batch
        pol = HFPolicy(model_dir, max_new_tokens=8)
        tr = GRPOTrainer(pol, GRPOConfig(lr=1e-2, micro_batch_tokens=budget, loss="dapo", max_grad_norm=1e6))
        tr.optimizer = torch.optim.SGD(pol.model.parameters(), lr=1.0)  # the update is the gradient itself
        tr.step(_batch(pol))
        states.append({k: v.clone() for k, v in pol.model.state_dict().items()})
    for k in states[0]:
        assert torch.allclose(states[0][k], states[1][k], atol=1e-5), k


def test_infra_failed_samples_never_enter_the_gradient(model_dir):
    pol = HFPolicy(model_dir, max_new_tokens=8)
    good = _batch(pol)
    failed = [
        _traj(0.0, _trace(pol, [5, 6, 7], [50, 51]), status=s)
        for s in ("infra_error", "judge_error", "policy_error")
    ]
    ref = HFPolicy(model_dir, max_new_tokens=8)
    GRPOTrainer(ref, GRPOConfig(lr=1e-2)).step(_batch(ref))
    m = GRPOTrainer(pol, GRPOConfig(lr=1e-2)).step(
        good + failed
    )  # same seqs, same order: bitwise same update
    assert m["train/skipped_untrainable"] == 3.0 and m["train/trajectories"] == 3.0
    for (k, a), b in zip(pol.model.state_dict().items(), ref.model.state_dict().values(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), k  # exactly as if the failed samples were absent


def test_staleness_bound_drops_too_old_samples_and_ratio_corrects_the_rest(model_dir):
    pol = HFPolicy(model_dir, max_new_tokens=8)
    batch = _batch(pol)
    for _ in range(3):
        pol.bump_version()  # the policy moved on 3 updates since these were sampled
    m = GRPOTrainer(pol, GRPOConfig(lr=1e-2, staleness=2)).step(batch)
    assert m["train/dropped_stale"] == 3.0 and m["train/skipped"] == 1.0
    m = GRPOTrainer(pol, GRPOConfig(lr=1e-2, staleness=3)).step(batch)
    assert m["train/dropped_stale"] == 0.0 and m["train/skipped"] == 0.0
    assert m["train/staleness_mean"] == 3.0


def test_clip_bounds_the_update_from_stored_logprobs(model_dir):
    """With stored logprobs far below the current ones (ratio >> 1+eps) and A > 0, every token is clipped:
    the clipped branch is constant, so the update has zero gradient."""
    pol = HFPolicy(model_dir, max_new_tokens=8)
    t = _trace(pol, [5, 6, 7], [20, 21])
    t = t.model_copy(update={"logprobs": [x - 5.0 for x in t.logprobs or ()]})
    m = GRPOTrainer(pol, GRPOConfig(lr=1e-2)).step([_traj(1.0, t), _traj(0.0, _trace(pol, [5, 6, 7], [30]))])
    assert m["train/clip_frac"] > 0.0
