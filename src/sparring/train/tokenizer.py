"""Train a small byte-level BPE tokenizer locally (no downloads).

Byte-level BPE (GPT-2 style) can encode any string, so tool outputs with odd
bytes never fail to tokenise. The chat template's markers
(:data:`sparring.chat_format.CHAT_SPECIAL_TOKENS`) plus ``<|pad|>`` and
``<|endoftext|>`` are registered as special tokens: each is one id, is never
split or merged by BPE, and is matched in raw text before pre-tokenisation,
so a turn boundary is a single, learnable token. The tokenizer is saved with
Sparring's ``chat_template`` (and ``response_template``), so ``apply_chat_template``
on it renders exactly :func:`sparring.chat_format.render_prompt`'s text.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from sparring.chat_format import CHAT_SPECIAL_TOKENS, EOS_TOKEN, PAD_TOKEN, attach_chat_template

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerFast

# Fixed ids: pad = 0, eos = 1, then the chat markers in template order.
SPECIAL_TOKENS: tuple[str, ...] = (PAD_TOKEN, EOS_TOKEN, *CHAT_SPECIAL_TOKENS)


def train_tokenizer(corpus: Iterable[str], vocab_size: int, out_dir: str | Path) -> PreTrainedTokenizerFast:
    """Train byte-level BPE on ``corpus`` and save it (``save_pretrained``) in ``out_dir``.

    ``vocab_size`` counts the 256 byte symbols and the special tokens, so it
    must exceed ``256 + len(SPECIAL_TOKENS)``. Training is deterministic for a
    fixed corpus.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    from sparring.errors import ConfigError

    floor = 256 + len(SPECIAL_TOKENS)
    if vocab_size <= floor:
        raise ConfigError(f"vocab_size={vocab_size} is too small: byte-level BPE needs more than {floor}")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator((t for t in corpus if t), trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        unk_token=None,
        additional_special_tokens=list(CHAT_SPECIAL_TOKENS),
        padding_side="right",
        model_max_length=1 << 30,  # the model's config bounds the context, not the tokenizer
        clean_up_tokenization_spaces=False,
    )
    attach_chat_template(hf)  # saved with it: apply_chat_template / parse_response work on the checkpoint
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    hf.save_pretrained(str(out))
    return hf
