"""completion_logprobs computes vocabulary logits only where a completion token is scored, and its
values and gradients are those of the full-length computation (Llama, Qwen2, a LoRA-wrapped model)."""

from __future__ import annotations

import random

import pytest

torch = pytest.importorskip("torch")

from sparring.train.grpo import _keep_kwarg, _Seq, completion_logprobs  # noqa: E402


def _reference(model, seqs, pad_id):
    """The plain computation: logits at every position, the completion's gathered and normalised."""
    L = max(len(s.prompt_ids) + len(s.completion_ids) for s in seqs)
    C = max(len(s.completion_ids) for s in seqs)
    ids = torch.full((len(seqs), L), pad_id)
    attn = torch.zeros((len(seqs), L), dtype=torch.long)
    for b, s in enumerate(seqs):
        n = len(s.prompt_ids) + len(s.completion_ids)
        ids[b, :n] = torch.tensor(s.prompt_ids + s.completion_ids)
        attn[b, :n] = 1
    logits = model(input_ids=ids, attention_mask=attn).logits.float()
    out = torch.zeros((len(seqs), C))
    for b, s in enumerate(seqs):
        p = len(s.prompt_ids)
        for t, tok in enumerate(s.completion_ids):
            out[b, t] = torch.log_softmax(logits[b, p - 1 + t], -1)[tok]
    return out


def _seqs(vocab: int, seed: int) -> list[_Seq]:
    rng = random.Random(seed)
    return [
        _Seq([rng.randrange(5, vocab) for _ in range(rng.randint(3, 40))],
             [rng.randrange(5, vocab) for _ in range(rng.randint(1, 12))])
        for _ in range(5)
    ]  # fmt: skip


class _Counting(torch.nn.Module):
    """Records how many positions the output head projects onto the vocabulary."""

    def __init__(self, head):
        super().__init__()
        self.head, self.rows = head, []

    def forward(self, h):
        self.rows.append(h.shape[0] * h.shape[1])
        return self.head(h)


def _load(path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path).eval()


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_values_and_gradients_match_the_full_computation(request, arch, seed):
    model = _load(request.getfixturevalue("tiny_model_dir" if arch == "llama" else "tiny_qwen2_model_dir"))
    assert _keep_kwarg(model) == "logits_to_keep"
    seqs = _seqs(model.config.vocab_size, seed)
    lp, mask = completion_logprobs(model, seqs, 0)
    ref = _reference(model, seqs, 0)
    assert mask.sum() == sum(len(s.completion_ids) for s in seqs)
    torch.testing.assert_close(lp, ref * mask, rtol=1e-5, atol=1e-5)
    # the gradient of a loss on them is the same too
    w = torch.randn_like(lp)
    g1 = torch.autograd.grad((lp * w).sum(), [p for p in model.parameters()])
    g2 = torch.autograd.grad((_reference(model, seqs, 0) * mask * w).sum(), [p for p in model.parameters()])
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_only_completion_positions_reach_the_vocabulary(tiny_model_dir):
    model = _load(tiny_model_dir)
    counting = _Counting(model.lm_head)
    model.lm_head = counting
    seqs = [_Seq(list(range(10, 60)), [7, 8, 9]), _Seq(list(range(10, 40)), [7, 8, 9, 10, 11])]
    with torch.no_grad():
        completion_logprobs(model, seqs, 0)
    L, first = 53, 29  # longest sequence; the shorter prompt's last position scores its first token
    assert counting.rows == [2 * (L - first)], "logits for prompt positions before the first scored one"
    with torch.no_grad():
        model(input_ids=torch.ones((2, L), dtype=torch.long))
    assert counting.rows[-1] == 2 * L  # positive control: a plain forward projects every position


def test_a_lora_wrapped_model_takes_the_same_path(tiny_model_dir):
    from peft import LoraConfig, get_peft_model

    base = _load(tiny_model_dir)
    plain = completion_logprobs(base, _seqs(base.config.vocab_size, 3), 0)[0].detach()
    cfg = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=True)
    model = get_peft_model(base, cfg)
    assert _keep_kwarg(model) == "logits_to_keep"
    lp, _ = completion_logprobs(model, _seqs(base.config.vocab_size, 3), 0)
    torch.testing.assert_close(lp.detach(), plain)  # LoRA B starts at zero: the same function
    lp.sum().backward()
    assert any(
        p.grad is not None and p.grad.abs().sum() > 0 for n, p in model.named_parameters() if "lora_" in n
    )
