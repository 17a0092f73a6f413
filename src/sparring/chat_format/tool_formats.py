"""Tool-call formats of common chat models: how each writes its calls, and a strict parser for each.

A model's chat template decides how it writes tool calls; the parser must be
the template's counterpart. Formats (``name``: who uses it, what it looks like):

- ``sparring``: Sparring's template, ``<tool_call>{"name": N, "arguments": {...}}</tool_call>``
  after the content, ``<|end|>`` (:mod:`sparring.chat_format.template`).
- ``hermes``: Hermes / Qwen2.5 / Qwen3, ``<tool_call>\\n{"name": N, "arguments": {...}}\\n</tool_call>``.
- ``qwen3_coder``: Qwen3-Coder / Qwen3.5 XML,
  ``<tool_call>\\n<function=N>\\n<parameter=K>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>``
  (string values raw, others JSON).
- ``llama3_json``: Llama 3.1 / 3.2, a bare ``{"name": N, "parameters": {...}}`` (optionally
  after ``<|python_tag|>``), several separated by ``;``.

These strict parsers are each format's exact counterpart (the round-trip
tests hold render and parse together); the policies, the Environment and the
adapters all read turns with the one tolerant reader,
:func:`sparring.chat_format.parse_tool_calls`, which accepts every form here.
Every ``parse_*`` is a pure function ``(text, tools=None) -> ParsedTurn`` that
never raises (a malformed call is an ``errors`` entry and stays in
``content``); every ``render_*`` writes ``(content, calls)`` as that model
would, and ``parse(render(...))`` gives the calls back (property-tested).
:func:`detect_tool_format` picks the format from a chat template's text;
:func:`get_tool_format` looks one up by name.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sparring.chat_format.parse import (
    END_MARKERS,  # noqa: F401 (re-exported: the markers every parser here cuts at)
    ParsedCall,
    ParsedTurn,
    _call_from_obj,
    join_content,
    param_types,
    parse_tool_calls,
    read_blocks,
    strip_end,
    typed_value,
)
from sparring.chat_format.template import CHAT_TEMPLATE, TOOL_CALL_CLOSE, TOOL_CALL_OPEN, render_assistant

_XML_CALL_RE = re.compile(
    r"<tool_call>\s*<function=([^>\n]*)>(.*?)</function>\s*(?:</tool_call>|$)", re.DOTALL
)
_XML_PARAM_RE = re.compile(r"<parameter=([^>\n]*)>\n?(.*?)\n?</parameter>", re.DOTALL)
_SEP_RE = re.compile(r"\s*;\s*")
_MAX_SCAN = 100  # '{' positions that fail to decode before giving up; bounds the cost on huge text


# --------------------------------------------------------------------------- sparring


def render_sparring(content: str, calls: Sequence[ParsedCall]) -> str:
    """Sparring's assistant turn body, ``<|end|>`` included (:func:`render_assistant`)."""
    msg = {"role": "assistant", "content": content, "tool_calls": [
        {"type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]}  # fmt: skip
    return render_assistant(msg)


def parse_sparring(text: str, tools: Sequence[dict[str, Any]] | None = None) -> ParsedTurn:
    """Sparring's format is read by the tolerant reader (it also takes what a drifting model writes)."""
    return parse_tool_calls(strip_end(text), tools)


# --------------------------------------------------------------------------- hermes


def render_hermes(content: str, calls: Sequence[ParsedCall]) -> str:
    """Qwen2.5's rendering: content, then ``\\n<tool_call>\\n{json}\\n</tool_call>`` per call."""
    out = content
    for c in calls:
        payload = json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False)
        out += f"\n{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"
    return out


def parse_hermes(text: str, tools: Sequence[dict[str, Any]] | None = None) -> ParsedTurn:
    """``<tool_call>JSON</tool_call>`` blocks (an unterminated last block too); the rest is content."""
    calls, errors, kept = read_blocks(strip_end(text))
    return ParsedTurn(content=join_content(kept), tool_calls=calls, errors=errors)


# --------------------------------------------------------------------------- qwen3 coder (XML)


def _xml_value(v: Any) -> str:
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)


def render_qwen3_coder(content: str, calls: Sequence[ParsedCall]) -> str:
    """Qwen3-Coder's rendering: one ``<function=...>`` block per call, string values raw."""
    out = content
    for c in calls:
        params = "".join(f"<parameter={k}>\n{_xml_value(v)}\n</parameter>\n" for k, v in c.arguments.items())
        out += f"\n<tool_call>\n<function={c.name}>\n{params}</function>\n</tool_call>"
    return out


def parse_qwen3_coder(text: str, tools: Sequence[dict[str, Any]] | None = None) -> ParsedTurn:
    """``<tool_call><function=N><parameter=K>V</parameter>...</function></tool_call>`` blocks.

    Values are typed by the tool's schema when ``tools`` is given (a ``string``
    parameter stays text even if it looks like JSON), else JSON when they parse.
    """
    text = strip_end(text)
    calls: list[ParsedCall] = []
    errors: list[str] = []
    kept: list[str] = []
    last = 0
    for m in _XML_CALL_RE.finditer(text):
        kept.append(text[last : m.start()])
        last = m.end()
        name = m.group(1).strip()
        if not name:
            errors.append("tool call has an empty <function=...> name")
            kept.append(m.group(0))
            continue
        types = param_types(tools, name)
        args = {k.strip(): typed_value(v, types.get(k.strip())) for k, v in _XML_PARAM_RE.findall(m.group(2))}
        calls.append(ParsedCall(name=name, arguments=args))
    kept.append(text[last:])
    if any(TOOL_CALL_OPEN in k for k in kept):  # an opened block that never became a well-formed call
        errors.append("malformed <tool_call> block: expected <function=NAME>...</function></tool_call>")
    return ParsedTurn(content=join_content(kept), tool_calls=calls, errors=errors)


# --------------------------------------------------------------------------- llama 3.1 json


def render_llama3_json(content: str, calls: Sequence[ParsedCall]) -> str:
    """Llama 3.1's rendering: ``{"name": N, "parameters": {...}}``, several joined by ``; ``."""
    body = "; ".join(
        json.dumps({"name": c.name, "parameters": c.arguments}, ensure_ascii=False) for c in calls
    )
    return f"{content}\n{body}" if content and body else (content or body)


def parse_llama3_json(text: str, tools: Sequence[dict[str, Any]] | None = None) -> ParsedTurn:
    """Bare JSON objects with ``name`` and ``parameters`` (or ``arguments``); the rest is content."""
    text = strip_end(text).replace("<|python_tag|>", "")
    decoder = json.JSONDecoder()
    calls: list[ParsedCall] = []
    errors: list[str] = []
    kept: list[str] = []
    last = pos = tries = 0
    while tries < _MAX_SCAN and (i := text.find("{", pos)) >= 0:
        try:
            obj, end = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError):
            pos, tries = i + 1, tries + 1
            continue
        if isinstance(obj, dict) and "name" in obj and ("parameters" in obj or "arguments" in obj):
            kept.append(text[last:i])
            c = _call_from_obj(obj)
            if isinstance(c, ParsedCall):
                calls.append(c)
            else:
                errors.append(c)
                kept.append(text[i:end])
            sep = _SEP_RE.match(text, end)
            last = sep.end() if sep else end
        pos = max(end, i + 1)
    kept.append(text[last:])
    return ParsedTurn(content=join_content(kept), tool_calls=calls, errors=errors)


# --------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class ToolFormat:
    """A named tool-call format: how the model writes calls and the parser that reads them back."""

    name: str
    render: Callable[[str, Sequence[ParsedCall]], str]
    parse: Callable[..., ParsedTurn]


TOOL_FORMATS: dict[str, ToolFormat] = {
    f.name: f
    for f in (
        ToolFormat("sparring", render_sparring, parse_sparring),
        ToolFormat("hermes", render_hermes, parse_hermes),
        ToolFormat("qwen3_coder", render_qwen3_coder, parse_qwen3_coder),
        ToolFormat("llama3_json", render_llama3_json, parse_llama3_json),
    )
}


def get_tool_format(name: str) -> ToolFormat:
    """The format called ``name``; a ValueError naming the choices otherwise."""
    try:
        return TOOL_FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown tool format {name!r}: choose one of {', '.join(TOOL_FORMATS)}") from None


def detect_tool_format(chat_template: str | None) -> str | None:
    """The tool-call format a chat template writes, from its text; None when it cannot tell."""
    if not chat_template:
        return None
    if chat_template == CHAT_TEMPLATE or "Sparring chat format" in chat_template:
        return "sparring"
    if "<function=" in chat_template and "<parameter=" in chat_template:
        return "qwen3_coder"
    if "<tool_call>" in chat_template:
        return "hermes"
    if '"parameters"' in chat_template and any(
        s in chat_template for s in ("<|python_tag|>", "ipython", "<|eom_id|>")
    ):
        return "llama3_json"
    return None
