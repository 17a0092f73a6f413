"""Weight sync to a served policy through the server's weight-update interface (local policy server)."""

from __future__ import annotations

import json
import urllib.request

import pytest
import torch

from sparring.errors import PolicyError
from sparring.policy.hf import HFPolicy
from sparring.policy.server import PolicyServer
from sparring.train.grpo import GRPOConfig, GRPOTrainer, _Seq, completion_logprobs
from sparring.train.model import build_tiny_model
from sparring.train.weight_sync import HTTPWeightSync
from sparring.trajectory import TokenTrace, Trajectory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, hidden=32, layers=1, heads=4)


def _traj(pol, completion, reward):
    with torch.no_grad():
        lp, _ = completion_logprobs(pol.model, [_Seq([5, 6, 7], completion)], 0)
    trace = TokenTrace(prompt_ids=[5, 6, 7], completion_ids=completion, logprobs=lp[0].tolist())
    return Trajectory(task_id="t", task_digest="d", policy="p", status="ok", reward=reward, group_id="g",
                      traces=[trace], policy_version=pol.version)  # fmt: skip


def _chat(url, seed=1):
    body = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8, "seed": seed,
            "temperature": 0, "logprobs": True}  # fmt: skip
    req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


def test_trained_weights_reach_the_served_policy(model_dir, tmp_path):
    trainer_policy = HFPolicy(model_dir, max_new_tokens=8)
    served = HFPolicy(model_dir, max_new_tokens=8)
    with PolicyServer(served, name="m") as server:
        before = _chat(server.url)
        trainer = GRPOTrainer(trainer_policy, GRPOConfig(lr=5e-2))
        for _ in range(3):
            trainer.step([_traj(trainer_policy, [20, 21, 22], 1.0), _traj(trainer_policy, [30, 31], 0.0)])
        sync = HTTPWeightSync(server.url, tmp_path / "sync")
        out = sync.push(trainer_policy)
        assert out["success"] is True and out["version"] == trainer_policy.version == 3
        for (k, a), b in zip(
            served.model.state_dict().items(), trainer_policy.model.state_dict().values(), strict=True
        ):
            assert torch.equal(a, b), k
        after = _chat(server.url)
        lp = lambda r: [c["logprob"] for c in r["choices"][0]["logprobs"]["content"]]  # noqa: E731
        assert lp(after) != lp(before)  # the server now samples from the trained weights
        assert len(list((tmp_path / "sync").iterdir())) == 1  # only the newest pushed copy is kept


def test_a_bad_update_is_refused_and_reported(model_dir, tmp_path):
    served = HFPolicy(model_dir, max_new_tokens=8)
    other = build_tiny_model(tmp_path / "other", seed=1, hidden=48, layers=1, heads=4)
    with PolicyServer(served, name="m") as server:
        sync = HTTPWeightSync(server.url, tmp_path / "sync")
        with pytest.raises(PolicyError, match="HTTP 400"):
            sync._post("/update_weights_from_disk", {"model_path": str(tmp_path / "nothing")})
        with pytest.raises(PolicyError, match="do not fit|HTTP 400"):
            sync._post("/update_weights_from_disk", {"model_path": str(other)})
    with pytest.raises(PolicyError, match="cannot reach"):
        HTTPWeightSync("http://127.0.0.1:9/v1", tmp_path / "s2", timeout_s=2).push(served)
