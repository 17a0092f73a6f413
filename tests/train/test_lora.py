"""LoRA in the RL stage (peft) on a real tiny transformer: only adapters train, the frozen base is the
KL reference, saved policies are plain merged model dirs plus the adapter, and a run with LoRA and
weight sync pushes its weights to a real local policy server and resumes to the same result."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sparring.errors import ConfigError
from sparring.policy.hf import HFPolicy
from sparring.policy.lora_files import is_lora, load_adapter
from sparring.train.grpo import GRPOConfig, GRPOTrainer, _Seq, completion_logprobs
from sparring.train.lora import LoRASettings, adapters_disabled, apply_lora
from sparring.train.model import build_tiny_model
from sparring.trajectory import TokenTrace, Trajectory

pytest.importorskip("peft")

EXE = Path(sys.executable).parent / "sparring"
PROMPT = [5, 6, 7, 8]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "m", seed=0, hidden=32, layers=1, heads=4)


def _lp(model, completion):
    with torch.no_grad():
        lp, _ = completion_logprobs(model, [_Seq(PROMPT, completion)], 0)
    return lp[0]


def _traj(pol, completion, reward):
    trace = TokenTrace(
        prompt_ids=PROMPT, completion_ids=completion, logprobs=_lp(pol.model, completion).tolist()
    )
    return Trajectory(task_id="t", task_digest="d", policy="p", status="ok", reward=reward, group_id="g",
                      traces=[trace], policy_version=pol.version)  # fmt: skip


def _train(pol, steps=3, kl=0.1):
    trainer = GRPOTrainer(pol, GRPOConfig(lr=5e-2, kl_coef=kl))
    for _ in range(steps):
        trainer.step([_traj(pol, [20, 21, 22], 1.0), _traj(pol, [30, 31], 0.0)])
    return trainer


def test_only_the_adapters_train_and_the_base_is_the_kl_reference(model_dir):
    pol = HFPolicy(model_dir, max_new_tokens=8)
    before = _lp(pol.model, [20, 21, 22])
    base = {k: v.clone() for k, v in pol.model.state_dict().items()}
    apply_lora(pol, LoRASettings(r=4), seed=0)
    assert is_lora(pol.model)
    assert torch.allclose(_lp(pol.model, [20, 21, 22]), before)  # B = 0: the policy is unchanged
    trainer = _train(pol)
    # the optimiser holds the adapters only, and no base weight moved
    held = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    names = [n for n, p in pol.model.named_parameters() if id(p) in held]
    assert names and all("lora_" in n for n in names)
    assert trainer.ref_model is None  # no second copy of the weights
    for k, v in pol.model.get_base_model().state_dict().items():
        if "lora_" not in k:
            assert torch.equal(v, base[k.replace(".base_layer", "")]), k
    after = _lp(pol.model, [20, 21, 22])
    assert after.sum() > before.sum()  # the rewarded completion became more likely
    with adapters_disabled(pol.model):  # the KL reference is exactly the warm-started model
        assert torch.equal(_lp(pol.model, [20, 21, 22]), before)


def test_a_saved_lora_policy_is_a_plain_model_and_its_adapter_reloads(model_dir, tmp_path):
    pol = HFPolicy(model_dir, max_new_tokens=8)
    apply_lora(pol, LoRASettings(r=4), seed=0)
    _train(pol, kl=0.0)
    pol.save(tmp_path / "out")
    want = _lp(pol.model, [20, 21, 22])
    merged = HFPolicy(tmp_path / "out", max_new_tokens=8)  # a plain model dir: merged weights
    assert not is_lora(merged.model)
    assert torch.allclose(_lp(merged.model, [20, 21, 22]), want, atol=1e-5)
    fresh = HFPolicy(model_dir, max_new_tokens=8)
    apply_lora(fresh, LoRASettings(r=4), seed=123)  # other random A: loading must overwrite it
    load_adapter(fresh.model, tmp_path / "out")
    assert torch.equal(_lp(fresh.model, [20, 21, 22]), want)


def test_bad_lora_settings_fail_with_a_clear_error(model_dir, tmp_path):
    pol = HFPolicy(model_dir, max_new_tokens=8)
    with pytest.raises(ConfigError, match="not modules of this model"):
        apply_lora(pol, LoRASettings(target_modules=["c_attn"]))
    with pytest.raises(ConfigError, match="no LoRA adapter"):
        apply_lora(pol, LoRASettings())
        load_adapter(pol.model, tmp_path)
    r = subprocess.run([str(EXE), "train", "--config", str(_cfg(tmp_path, "x", "http://127.0.0.1:9", lora=False))],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode != 0 and "set model.lora" in r.stderr and not (tmp_path / "x").exists()


CONFIG = """
family: shell-ops
n_train: 4
n_heldout: 2
heldout_samples: 2
seed: 1
sft_steps: 4
sft_batch: 2
iterations: 2
tasks_per_iteration: 2
group_size: 2
max_steps: 2
heldout_max_steps: 2
resample_rounds: 1
checkpoint_every: 1
monitor: {exporters: []}
model: {hidden: 32, layers: 1, heads: 4, vocab_size: 600, max_new_tokens: 12}
warm_start: {teacher: noisy, epsilon: 0.5, samples: 1, passed_only: false}
grpo: {lr: 1.0e-2, kl_coef: 0.05}
"""


def _cfg(tmp_path: Path, name: str, url: str, lora: bool = True) -> Path:
    """A run config with weight sync to ``url``: sglang-style with LoRA, or vllm-lora without it (invalid)."""
    text = CONFIG + f"workdir: {tmp_path / name}\n"
    text += f"weight_sync: {{url: '{url}', kind: {'sglang' if lora else 'vllm-lora'}}}\n"
    if lora:
        text = text.replace("max_new_tokens: 12}", "max_new_tokens: 12, lora: {r: 4}}")
    p = tmp_path / f"{name}.yaml"
    p.write_text(text)
    return p


@pytest.mark.slow
def test_a_lora_run_pushes_weights_to_the_server_and_resumes_to_the_same_result(model_dir, tmp_path):
    from safetensors.torch import load_file

    from sparring.policy.server import PolicyServer

    served = HFPolicy(model_dir, max_new_tokens=8)  # the server starts from the same base model
    with PolicyServer(served, name="m") as server:
        cfg = _cfg(tmp_path, "run", server.url)
        cfg.write_text(cfg.read_text().replace("model: {hidden: 32, layers: 1, heads: 4, vocab_size: 600,",
                                               f"model: {{path: '{model_dir}',"))  # fmt: skip
        r = subprocess.run([str(EXE), "train", "--config", str(cfg), "--json"], capture_output=True, text=True,
                           timeout=1200)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        d = json.loads(r.stdout)
        # one push of the warm-started weights, then one after every update that changed weights
        updates = [it for it in d["iterations"] if it["grpo_skipped"] is False]
        assert d["weight_syncs"] == 1 + len(updates)
        assert all("weight_sync_s" in it for it in updates)
        ck = tmp_path / "run" / "checkpoints" / "iter-00001" / "model"
        assert (ck / "adapter" / "adapter_model.safetensors").is_file()
        saved = load_file(str(ck / "model.safetensors"))
        # the served model now holds exactly the trained (merged) weights of the last update
        for k, v in served.model.state_dict().items():
            if k in saved:
                assert torch.equal(v, saved[k]), k
    # resuming from the last checkpoint rebuilds base + adapters: the held-out result is identical
    r2 = subprocess.run([str(EXE), "train", "--config", str(cfg), "--resume", "--json"], capture_output=True,
                        text=True, timeout=1200)  # fmt: skip
    assert r2.returncode != 0 or json.loads(r2.stdout)["heldout"] == d["heldout"], r2.stderr[-2000:]
    assert r2.returncode == 0, r2.stderr[-2000:]
