"""Turn-level credit from forked rollouts: the formula on a worked tree, and GRPO exactly without branches."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from sparring.train.advantages import grouped_advantages
from sparring.train.tree_credit import (
    CREDITS,
    Node,
    branch_values,
    flat_advantages,
    get_credit,
    tree_advantages,
)

groups = st.lists(
    st.tuples(st.integers(0, 3), st.sampled_from([0.0, 0.25, 0.5, 1.0, 1.5, -1.0, 0.1]), st.integers(1, 6)),
    min_size=1,
    max_size=24,
)


@settings(max_examples=300, deadline=None)
@given(groups, st.booleans())
def test_without_branch_points_tree_credit_is_grpo_exactly(rows, normalize):
    nodes = [Node(f"t{i}", g, r, turns) for i, (g, r, turns) in enumerate(rows)]
    want = grouped_advantages([n.group for n in nodes], [n.reward for n in nodes], normalize_std=normalize)
    got = tree_advantages(nodes, normalize_std=normalize)
    assert [got[n.id] for n in nodes] == [[a] * n.turns for n, a in zip(nodes, want, strict=True)]
    assert flat_advantages(nodes, normalize_std=normalize) == got


def test_each_turn_gets_the_value_it_moved_to_over_the_value_it_came_from():
    nodes = [
        Node("r1", "g", 1.0, 3),
        Node("r2", "g", 0.0, 2),
        Node("b1", "g", 0.0, 3, parent_id="r1", branch_turn=1),
        Node("b2", "g", 0.0, 2, parent_id="r1", branch_turn=1),
    ]
    assert branch_values(nodes) == {("r1", 1): 1 / 3}
    s = math.sqrt(((1 - 0.25) ** 2 + 3 * 0.25**2) / 4) + 1e-6  # std of the whole tree's rewards
    a = tree_advantages(nodes)
    mu = 0.5  # the roots' mean: GRPO's baseline
    assert a["r1"] == [(1 / 3 - mu) / s, (1 - 1 / 3) / s, (1 - 1 / 3) / s]  # turn 1 led to V=1/3, then to 1
    assert a["r2"] == [(0 - mu) / s] * 2  # no branch point: the episode advantage
    assert a["b1"] == [None, (0 - 1 / 3) / s, (0 - 1 / 3) / s]  # its first turn is the root's
    assert a["b2"] == [None, (0 - 1 / 3) / s]
    flat = flat_advantages(nodes)
    assert flat["b1"] == [None] * 3 and flat["r1"] == [grouped_advantages(["g", "g"], [1.0, 0.0])[0]] * 3


def test_nested_branch_points_chain_their_values_and_equal_rewards_give_nothing():
    nodes = [
        Node("r", "g", 1.0, 4),
        Node("b1", "g", 0.0, 4, parent_id="r", branch_turn=1),
        Node("b3", "g", 1.0, 4, parent_id="r", branch_turn=3),
    ]
    v1, v3 = 0.5, 1.0
    s = math.sqrt(sum((x - 2 / 3) ** 2 for x in (1.0, 0.0, 1.0)) / 3) + 1e-6
    assert tree_advantages(nodes)["r"] == [(v1 - 1.0) / s, (v3 - v1) / s, (v3 - v1) / s, (1.0 - v3) / s]
    same = [Node("r", "g", 1.0, 2), Node("b", "g", 1.0, 2, parent_id="r", branch_turn=1)]
    assert tree_advantages(same) == {"r": [0.0, 0.0], "b": [0.0, 0.0]}
    orphan = [Node("r", "g", 1.0, 2), Node("x", "g", 0.0, 2, parent_id="gone", branch_turn=1)]
    assert tree_advantages(orphan)["x"] == [None, None]


def test_the_registry_names_both_credits():
    assert set(CREDITS) == {"flat", "tree"} and get_credit("tree") is tree_advantages


def test_the_trainer_trains_a_branch_only_past_its_branch_turn_and_flat_ignores_branches(tmp_path):
    import torch

    from sparring.policy.hf import HFPolicy
    from sparring.train.grpo import GRPOConfig, GRPOTrainer, _Seq, completion_logprobs
    from sparring.train.model import build_tiny_model
    from sparring.trajectory import TokenTrace, Trajectory

    model = build_tiny_model(tmp_path / "model", seed=0, hidden=32, layers=2, heads=4)
    pol = HFPolicy(model, max_new_tokens=8)

    def trace(text: str) -> TokenTrace:
        prompt = pol.tokenizer.encode("prompt", add_special_tokens=False)
        completion = pol.tokenizer.encode(text, add_special_tokens=False)
        with torch.no_grad():
            lp, _ = completion_logprobs(pol.model, [_Seq(prompt, completion)], pol.tokenizer.pad_token_id)
        return TokenTrace(prompt_ids=prompt, completion_ids=completion, logprobs=lp[0].tolist())

    def traj(tid, reward, texts, **kw):
        return Trajectory(id=tid, task_id="t", task_digest="d", policy="hf", status="ok", reward=reward,
                          group_id="g", traces=[trace(x) for x in texts], **kw)  # fmt: skip

    root = traj("r", 1.0, ["look", "fix", "submit"])
    other = traj("o", 0.0, ["guess", "submit"])
    branch = traj("b", 0.0, ["look", "break", "submit"], parent_id="r", branch_turn=1)
    tree = GRPOTrainer(pol, GRPOConfig(lr=1e-3, credit="tree")).step([root, other, branch])
    assert tree["train/branches"] == 1.0 and tree["train/skipped"] == 0.0
    assert tree["train/turns"] == 3 + 2 + 2  # the branch's first turn is the root's: trained once
    fresh = [t.model_copy(update={"policy_version": pol.version}) for t in (root, other, branch)]  # not stale
    flat = GRPOTrainer(pol, GRPOConfig(lr=1e-3)).step(fresh)
    assert flat["train/turns"] == 3 + 2 and flat["train/trainable"] == 2.0


def test_the_training_config_takes_credit_tree_with_branch_settings():
    import pytest

    from sparring.errors import ConfigError
    from sparring.train.config import load_config

    cfg = load_config(None, ["credit=tree", "branch_at=first:2", "branches=3"])
    assert cfg.credit == "tree" and cfg.grpo.credit == "tree" and cfg.branches == 3
    assert load_config(None, ["credit=tree", "branch_at=1", "branches=2"]).branch_at == "1"  # YAML's number
    assert load_config(None, ["credit=tree", "branch_at=[1, 2]", "branches=2"]).branch_at == "1,2"
    for bad in (["credit=tree"], ["branch_at=1", "branches=2"], ["credit=tree", "branch_at=0", "branches=2"]):
        with pytest.raises(ConfigError):
            load_config(None, bad)
