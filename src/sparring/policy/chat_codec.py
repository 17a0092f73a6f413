"""A tokenizer's own chat template, as a token-level policy uses it (any HF chat model, Sparring's too).

:class:`ChatCodec` renders a conversation with ``tokenizer.apply_chat_template(
..., tools=...)`` (Sparring's tokenizers carry Sparring's template, hub models
their own), knows which token ids end a turn, and parses a sampled turn with
the one tolerant reader (:func:`sparring.chat_format.parse_tool_calls`). The
tool-call format decides how tools and earlier calls are *shown*: detected from
the template, or named (``hf:PATH#FORMAT``, ``model.tool_format``). A template
that ignores ``tools`` (SmolLM2's ChatML one) gets them described in the system
prompt, with a warning, and its earlier calls written into the turns' text.

Token-in, token-out. :meth:`ChatCodec.continuation_ids` gives the ids the
environment appends after a sampled assistant turn (the tool results, any user
nudge, the next generation prompt), cut from the template's own tokenisation at
the turn's end-of-turn token, the way TRL does. A multi-turn prompt is then
``previous prompt + the ids the model sampled + continuation``: what the model
wrote is never re-tokenised. Where a template is not prefix-preserving at that
point the method says so (None) rather than guessing.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

from sparring.chat_format import (
    END,
    ParsedCall,
    ParsedTurn,
    attach_chat_template,
    parse_tool_calls,
    template_messages,
)
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


FORMAT_CHOICES = "sparring, hermes, qwen3_coder, llama3_json"


def template_shows_tools(template: str) -> bool:
    """Whether a chat template renders the ``tools`` it is given (SmolLM2's ChatML one does not)."""
    return "tools" in template


def tools_prompt(tools: Sequence[dict[str, Any]], fmt: ToolFormat) -> str:
    """The tools described in words, for a template that cannot show them, with one example call."""
    listing = "\n".join(json.dumps(t.get("function", t), ensure_ascii=False) for t in tools)
    example = fmt.render("", [ParsedCall("NAME", {"ARG": "VALUE"})]).strip()
    return (
        "# Tools\nYou can call these tools (JSON schemas):\n" + listing
        + "\nTo call a tool, write exactly:\n" + example + "\nThen wait for the result."
    )  # fmt: skip


def tools_in_text(
    messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]], fmt: ToolFormat
) -> list[dict[str, Any]]:
    """Messages for a template that ignores ``tools`` and ``tool_calls``: the tool list in the system
    message (a new first one if there is none) and each assistant call written out in ``fmt``."""
    out: list[dict[str, Any]] = []
    for m in messages:
        m = {**m, "content": m.get("content") or ""}
        calls = m.pop("tool_calls", None) if m.get("role") == "assistant" else None
        if calls:
            parsed = [
                ParsedCall(str(fn.get("name", "")), _args(fn.get("arguments")))
                for c in calls if isinstance(fn := (c.get("function") if isinstance(c, dict) else None), dict)
            ]  # fmt: skip
            m["content"] = fmt.render(m["content"], parsed).strip()
        out.append(m)
    if tools:
        desc = tools_prompt(tools, fmt)
        if out and out[0].get("role") == "system":
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{desc}".strip()}
        else:
            out.insert(0, {"role": "system", "content": desc})
    return out


def _args(raw: Any) -> dict[str, Any]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return {}
    return raw if isinstance(raw, dict) else {}


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
        self.shows_tools: bool = template_shows_tools(self.template)
        """False: the template ignores ``tools=`` (SmolLM2's ChatML): they go in the system prompt."""
        name = tool_format or detect_tool_format(self.template)
        if name is None and not self.shows_tools:
            name = "hermes"
        if name is None:
            raise PolicyError(
                "cannot tell how this chat template writes tool calls: name the format with "
                f"hf:PATH#FORMAT (or model.tool_format in a training config), FORMAT one of {FORMAT_CHOICES}"
            )
        try:
            self.format: ToolFormat = get_tool_format(name)
        except ValueError:
            raise PolicyError(
                f"unknown tool-call format {name!r}: write hf:PATH#FORMAT with FORMAT one of {FORMAT_CHOICES}"
            ) from None
        if not self.shows_tools:
            if self.format.name == "sparring":
                raise PolicyError(
                    "the sparring tool-call format needs Sparring's chat template; for this template "
                    f"write hf:PATH#FORMAT with FORMAT one of {FORMAT_CHOICES.replace('sparring, ', '')}"
                )
            warnings.warn(
                f"this chat template cannot show tools to the model: they are described in the system "
                f"prompt and calls are written as {self.format.name} (choose another with hf:PATH#FORMAT)",
                UserWarning,
                stacklevel=2,
            )
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
        """The conversation as this template writes it (tool-call arguments passed as objects).

        A template that cannot show tools gets them in the system prompt and
        earlier calls written into the assistant turns' text (:func:`tools_in_text`).
        """
        if not self.shows_tools:
            messages, tools = tools_in_text(messages, tools, self.format), ()
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
        """A sampled turn read back by the one tolerant reader every path uses (the stop token is not text).

        The template's format decides how calls are *shown* to the model; what the model
        writes is read like any other path reads it (:func:`~sparring.chat_format.parse_tool_calls`).
        """
        ids = list(completion_ids)
        if ids and ids[-1] in self.stop_ids:
            ids.pop()
        return parse_tool_calls(self.decode(ids), list(tools) or None)
