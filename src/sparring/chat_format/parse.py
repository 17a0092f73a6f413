"""Read tool calls back out of sampled text, leniently, whatever the model's format.

:func:`parse_tool_calls` reads ``<tool_call>JSON</tool_call>`` blocks (Sparring's
own format and Hermes / Qwen2.5; also an unterminated last block, a JSON list
of calls, ``arguments`` given as a JSON string, ``parameters`` for
``arguments``, and the OpenAI ``{"function": {...}}`` shape), Qwen3-Coder's XML
form (``<tool_call><function=NAME><parameter=KEY>VALUE</parameter></function></tool_call>``)
and, when there is no tag at all, bare JSON objects with ``name`` and
``arguments``/``parameters`` (Llama 3.1). It never raises: a malformed call
becomes an entry of ``ParsedTurn.errors`` and stays verbatim in ``content`` so
the model sees what it wrote next to the error observation. The strict,
one-format parsers (and their renderers) are in :mod:`sparring.chat_format.tool_formats`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sparring.chat_format.template import END, EOS_TOKEN, TOOL_CALL_CLOSE, TOOL_CALL_OPEN

# End-of-turn / end-of-text markers of common chat templates; a turn's text ends at the first.
END_MARKERS: tuple[str, ...] = (
    END, EOS_TOKEN, "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>", "</s>",
)  # fmt: skip

_SPACE_RE = re.compile(r"\s*")
_XML_FUNC_RE = re.compile(r"^\s*<function=([^>\n]+)>(.*?)(?:</function>\s*)?$", re.DOTALL)
_XML_PARAM_RE = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)
_MAX_BARE_SCAN = 100  # '{' positions tried when looking for bare JSON calls; bounds the cost on huge text


@dataclass(frozen=True)
class ParsedCall:
    """One well-formed tool call: a name and a JSON-object of arguments."""

    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedTurn:
    """A completion read back: the prose, the calls, and one message per malformed call."""

    content: str
    tool_calls: list[ParsedCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def to_message(self, id_offset: int = 0) -> dict[str, Any]:
        """An OpenAI assistant message; call ids are ``call_<id_offset + k>``, arguments JSON strings."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            msg["tool_calls"] = [
                {
                    "id": f"call_{id_offset + k}",
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(c.arguments, ensure_ascii=False)},
                }
                for k, c in enumerate(self.tool_calls)
            ]
        return msg


def _snippet(text: str, n: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _call_from_obj(obj: Any) -> ParsedCall | str:
    """A ParsedCall from a decoded JSON value, or the reason it is not one."""
    if not isinstance(obj, dict):
        return f"expected a JSON object with 'name' and 'arguments', got {type(obj).__name__}"
    if isinstance(obj.get("function"), dict):  # OpenAI shape {"type": "function", "function": {...}}
        obj = obj["function"]
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return "tool call has no 'name' string"
    args: Any = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            return f"tool call {name!r}: 'arguments' is a string but not valid JSON ({e.msg})"
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return f"tool call {name!r}: 'arguments' must be a JSON object, got {type(args).__name__}"
    return ParsedCall(name=name.strip(), arguments=args)


def _parse_xml_call(body: str) -> ParsedCall | str | None:
    """Qwen3-Coder style ``<function=NAME><parameter=K>V</parameter></function>``; None if not that form."""
    m = _XML_FUNC_RE.match(body)
    if not m:
        return None
    name = m.group(1).strip()
    if not name:
        return "tool call has an empty <function=...> name"
    args: dict[str, Any] = {}
    for key, value in _XML_PARAM_RE.findall(m.group(2)):
        try:  # values may be JSON (numbers, objects); fall back to the raw string
            args[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            args[key.strip()] = value
    return ParsedCall(name=name, arguments=args)


def _parse_block(body: str) -> list[ParsedCall] | str:
    """The calls in one ``<tool_call>`` block, or why it is malformed."""
    xml = _parse_xml_call(body)
    if xml is not None:
        return [xml] if isinstance(xml, ParsedCall) else xml
    text = body.strip()
    if text.startswith("```"):  # a fenced block inside the tags
        text = text.strip("`").removeprefix("json").strip()
    if not text:
        return "empty <tool_call> block"
    try:
        obj, end = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as e:
        return f"invalid JSON in <tool_call> ({e.msg} at char {e.pos}): {_snippet(text)}"
    if text[end:].strip():
        return f"unexpected text after the JSON in <tool_call>: {_snippet(text[end:])}"
    objs = obj if isinstance(obj, list) else [obj]
    calls: list[ParsedCall] = []
    for o in objs:
        c = _call_from_obj(o)
        if isinstance(c, str):
            return c
        calls.append(c)
    if not calls:
        return "empty list of tool calls"
    return calls


def tool_call_blocks(text: str) -> Iterator[tuple[int, int, str]]:
    """``(start, end, body)`` of each ``<tool_call>`` block, an unterminated last one included.

    A block whose body is JSON ends at the first ``</tool_call>`` after that
    JSON, so the closing tag written inside a string value (an argument that
    is a chat transcript, a file of this very format) does not cut the call.
    Any other body ends at the first closing tag.
    """
    decoder = json.JSONDecoder()
    pos = 0
    while (start := text.find(TOOL_CALL_OPEN, pos)) >= 0:
        body = start + len(TOOL_CALL_OPEN)
        close = text.find(TOOL_CALL_CLOSE, body)
        space = _SPACE_RE.match(text, body)
        first = space.end() if space else body  # the body's first non-space
        if close >= 0 and first < close and text[first] in "{[":
            try:
                _, json_end = decoder.raw_decode(text, first)
            except (json.JSONDecodeError, RecursionError):
                pass
            else:
                if json_end > close:
                    close = text.find(TOOL_CALL_CLOSE, json_end)
        stop = close if close >= 0 else len(text)
        end = stop + len(TOOL_CALL_CLOSE) if close >= 0 else len(text)
        yield start, end, text[body:stop]
        pos = end


def read_blocks(text: str) -> tuple[list[ParsedCall], list[str], list[str]]:
    """``(calls, errors, kept)`` of the ``<tool_call>`` blocks in ``text``: ``kept`` is the text
    outside well-formed blocks, in order (a malformed block stays in it verbatim)."""
    calls: list[ParsedCall] = []
    errors: list[str] = []
    kept: list[str] = []
    last = 0
    for start, end, body in tool_call_blocks(text):
        kept.append(text[last:start])
        last = end
        parsed = _parse_block(body)
        if isinstance(parsed, str):
            errors.append(parsed)
            kept.append(text[start:end])
        else:
            calls.extend(parsed)
    kept.append(text[last:])
    return calls, errors, kept


def strip_end(text: str) -> str:
    """``text`` cut at the first end-of-turn marker (what follows it is not the model's turn)."""
    cut = len(text)
    for marker in END_MARKERS:
        i = text.find(marker)
        if 0 <= i < cut:
            cut = i
    return text[:cut]


def _parse_bare(text: str) -> tuple[list[ParsedCall], list[tuple[int, int]]]:
    """Bare JSON objects that look like calls (have a 'name' and 'arguments'/'parameters')."""
    decoder = json.JSONDecoder()
    calls: list[ParsedCall] = []
    spans: list[tuple[int, int]] = []
    pos, tries = 0, 0
    while tries < _MAX_BARE_SCAN:
        i = text.find("{", pos)
        if i < 0:
            break
        tries += 1
        try:
            obj, end = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError):
            pos = i + 1
            continue
        inner = (
            obj.get("function") if isinstance(obj, dict) and isinstance(obj.get("function"), dict) else obj
        )
        if isinstance(inner, dict) and "name" in inner and ("arguments" in inner or "parameters" in inner):
            c = _call_from_obj(obj)
            if isinstance(c, ParsedCall):
                calls.append(c)
                spans.append((i, end))
        pos = end if end > i else i + 1
    return calls, spans


def parse_tool_calls(text: str) -> ParsedTurn:
    """Read tool calls out of a completion; never raises (malformed calls become ``errors``)."""
    try:
        return _parse(text)
    except Exception as e:  # a parser bug must not kill a rollout: report it as a malformed turn
        return ParsedTurn(content=str(text), errors=[f"could not parse the turn: {type(e).__name__}: {e}"])


def _parse(text: str) -> ParsedTurn:
    text = strip_end(str(text))
    calls, errors, kept = read_blocks(text)
    if not calls and not errors:
        bare, spans = _parse_bare(text)
        if bare:
            kept, last = [], 0
            for s, e in spans:
                kept.append(text[last:s])
                last = e
            kept.append(text[last:])
            calls = bare
    content = "\n".join(p.strip() for p in kept if p.strip())
    return ParsedTurn(content=content, tool_calls=calls, errors=errors)
