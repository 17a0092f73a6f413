"""A tokenizer's own chat template, as a token-level policy uses it (any HF chat model, Sparring's too).

:class:`ChatCodec` renders a conversation with ``tokenizer.apply_chat_template(
..., tools=...)`` (Sparring's tokenizers carry Sparring's template, hub models
their own), knows which token ids end a turn, and parses a sampled turn with
the tool-call format the template writes (detected from the template, or
configured: :mod:`sparring.chat_format.tool_formats`).

Token-in, token-out. :meth:`ChatCodec.continuation_ids` gives the ids the
environment appends after a sampled assistant turn (the tool results, any user
nudge, the next generation prompt), cut from the template's own tokenisation at
the turn's end-of-turn token, the way TRL does. A multi-turn prompt is then
``previous prompt + the ids the model sampled + continuation``: what the model
wrote is never re-tokenised. Where a template is not prefix-preserving at that
point the method says so (None) rather than guessing.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from sparring.chat_format import END, ParsedTurn, attach_chat_template, template_messages
from sparring.chat_format.tool_formats import ToolFormat, detect_tool_format, get_tool_format
from sparring.errors import PolicyError

# End-of-turn tokens of common templates: a turn stops at any of them that the vocabulary has.
END_OF_TURN_TOKENS: tuple[str, ...] = (
    END,
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<end_of_turn>",
    "<|return|>",
)


class ChatCodec:
    """Render, tokenise, stop and parse for one tokenizer's chat template."""

    def __init__(
        self, tokenizer: Any, *, tool_format: str | None = None, stop_ids: Iterable[int] = ()
    ) -> None:
        self.tokenizer = tokenizer
        vocab = tokenizer.get_vocab()
        if getattr(tokenizer, "chat_template", None) is None:
            if END not in vocab:
                raise PolicyError(
                    "the tokenizer has no chat_template: set tokenizer.chat_template (a hub model's own) "
                    "or build the model with sparring.train.model.build_tiny_model"
                )
            attach_chat_template(tokenizer)  # a Sparring checkpoint from before templates
        self.template: str = tokenizer.chat_template
        name = tool_format or detect_tool_format(self.template)
        if name is None:
            raise PolicyError(
                "cannot tell how this chat template writes tool calls: "
                "pass tool_format= one of sparring, hermes, qwen3_coder, llama3_json"
            )
        try:
            self.format: ToolFormat = get_tool_format(name)
        except ValueError as e:
            raise PolicyError(str(e)) from None
        ids = set(stop_ids)
        if isinstance(tokenizer.eos_token_id, int):
            ids.add(tokenizer.eos_token_id)
        ids.update(vocab[t] for t in END_OF_TURN_TOKENS if t in vocab)
        self.stop_ids: frozenset[int] = frozenset(ids)

    # ------------------------------------------------------------------ text and ids

    def render(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]] = (),
        *,
        add_generation_prompt: bool = True,
    ) -> str:
        """The conversation as this template writes it (tool-call arguments passed as objects)."""
        return str(
            self.tokenizer.apply_chat_template(
                template_messages(messages),
                tools=list(tools) or None,
                tokenize=False,
                add_generation_prompt=add_generation_prompt,
            )  # fmt: skip
        )

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def prompt_ids(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()
    ) -> list[int]:
        return self.encode(self.render(messages, tools))

    def continuation_ids(
        self,
        messages: Sequence[dict[str, Any]],
        tools: Sequence[dict[str, Any]],
        turn: int,
        *,
        ended: bool = True,
    ) -> list[int] | None:
        """The ids that follow assistant message ``turn`` up to the generation prompt after ``messages``.

        ``ended``: the sampled turn ended with an end-of-turn token; when it did
        not (cut at the token limit) the template's end-of-turn token opens the
        continuation, so the next prompt still closes the turn. None when the
        template does not render the conversation so far as a prefix of the whole.
        """
        head = self.encode(self.render(messages[: turn + 1], tools, add_generation_prompt=False))
        full = self.prompt_ids(messages, tools)
        cut = max((i for i, t in enumerate(head) if t in self.stop_ids), default=-1)
        if cut < 0:
            return None
        head = head[: cut + 1]
        if full[: len(head)] != head:
            return None
        rest = full[len(head) :]
        return rest if ended else [head[-1], *rest]

    def sft_pairs(
        self, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]] = ()
    ) -> list[tuple[str, str]]:
        """(prompt, completion) texts for supervised training, one per assistant turn, in this template.

        The completion is what the template writes for that turn after the
        generation prompt, up to and including its end-of-turn token (for
        Sparring's template exactly :func:`~sparring.chat_format.render_assistant`).
        A turn the template does not render as a continuation of its prompt is left out.
        """
        ends = [str(t) for t in self.tokenizer.convert_ids_to_tokens(sorted(self.stop_ids))]
        pairs = []
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            prompt = self.render(messages[:i], tools)
            full = self.render(messages[: i + 1], tools, add_generation_prompt=False)
            if not full.startswith(prompt):
                continue
            turn = full[len(prompt) :]
            cut = max((turn.rfind(e) + len(e) for e in ends if e and e in turn), default=len(turn))
            pairs.append((prompt, turn[:cut]))
        return pairs

    def parse(self, completion_ids: Sequence[int], tools: Sequence[dict[str, Any]] = ()) -> ParsedTurn:
        """A sampled turn read back with this template's tool-call format (the stop token is not text)."""
        ids = list(completion_ids)
        if ids and ids[-1] in self.stop_ids:
            ids.pop()
        return self.format.parse(self.decode(ids), list(tools))
