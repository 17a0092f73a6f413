"""Read tool calls back out of sampled text: one tolerant reader for every path.

:func:`parse_tool_calls` is what every path uses (``hf:`` policies, the
``openai:`` client when a server returns no native calls, the TRL adapters,
the Environment's text actions), so one model turn parses the same wherever it
was sampled. It reads, in this order, the first form that is present:

1. ``<tool_call>...</tool_call>`` blocks (Sparring's format, Hermes / Qwen2.5;
   also an unterminated last block); a block's body is JSON (an object, a list
   of calls, fenced or not) or Qwen3-Coder XML
   (``<function=NAME><parameter=KEY>VALUE</parameter></function>``);
2. Qwen3-Coder XML without the ``<tool_call>`` wrapper;
3. fenced code blocks (```` ```json ````) whose whole body is a call (or a list of calls);
4. bare JSON objects with ``name`` and ``arguments`` or ``parameters`` (Llama 3.1,
   optionally after ``<|python_tag|>``, several separated by ``;``).

A call is JSON with a ``name`` string and ``arguments`` (or ``parameters``,
or the OpenAI ``{"function": {...}}`` shape; arguments may be a JSON string).
It is strict about what it accepts: arguments must be a JSON object, and when
the turn's ``tools`` are given the name must be one of them (XML values are
then typed by the tool's schema). It never raises: a malformed call becomes
an entry of ``ParsedTurn.errors`` and stays verbatim in ``content`` so the
model sees what it wrote next to the error observation. Reasoning blocks
(``<think>...</think>``) are left out of ``content``. The one-format
renderers (and strict parsers, used for round-trip tests) are in
:mod:`sparring.chat_format.tool_formats`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparring.chat_format.template import END, EOS_TOKEN, TOOL_CALL_CLOSE, TOOL_CALL_OPEN

# End-of-turn / end-of-text markers of common chat templates; a turn's text ends at the first.
END_MARKERS: tuple[str, ...] = (
    END, EOS_TOKEN, "<|im_end|>", "<|eot_id|>", "<|eom_id|>", "<|end_of_text|>", "<end_of_turn>", "</s>",
)  # fmt: skip

_SPACE_RE = re.compile(r"\s*")
_XML_FUNC_RE = re.compile(r"^\s*<function=([^>\n]+)>(.*?)(?:</function>\s*)?$", re.DOTALL)
_XML_BARE_RE = re.compile(r"<function=([^>\n]*)>(.*?)(?:</function>|$)", re.DOTALL)
_XML_PARAM_RE = re.compile(r"<parameter=([^>\n]+)>\n?(.*?)\n?</parameter>", re.DOTALL)
_FENCE_RE = re.compile(r"```[ \t]*([A-Za-z_]*)[ \t]*\n(.*?)```", re.DOTALL)
_FENCE_LANGS = ("", "json", "tool_call", "tool_code", "javascript", "js")
_THINK_RE = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)
_SEP_RE = re.compile(r"\s*;")
_MAX_BARE_SCAN = 100  # '{' positions tried when looking for bare JSON calls; bounds the cost on huge text

Tools = Sequence[dict[str, Any]] | None


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


def tool_names(tools: Tools) -> frozenset[str] | None:
    """The names of OpenAI tool schemas (None when no tools are given: any name is accepted)."""
    if not tools:
        return None
    names = set()
    for tool in tools:
        fn = tool.get("function", tool) if isinstance(tool, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str):
            names.add(fn["name"])
    return frozenset(names)


def param_types(tools: Tools, name: str) -> dict[str, Any]:
    """``{parameter: declared JSON type}`` of tool ``name`` in ``tools`` (empty if unknown)."""
    for tool in tools or ():
        fn = tool.get("function", tool) if isinstance(tool, dict) else {}
        if isinstance(fn, dict) and fn.get("name") == name:
            props = (fn.get("parameters") or {}).get("properties") or {}
            return {k: (v or {}).get("type") for k, v in props.items() if isinstance(v, dict)}
    return {}


def typed_value(raw: str, declared: Any) -> Any:
    """An XML parameter value: raw text for a declared string, else JSON if it parses, else the text."""
    if declared == "string" or (isinstance(declared, list) and "string" in declared):
        return raw
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, RecursionError):
        return raw


def _known(call: ParsedCall, tools: Tools) -> ParsedCall | str:
    """``call`` if its name is one of ``tools`` (or no tools are given), else why not."""
    names = tool_names(tools)
    if names is None or call.name in names:
        return call
    return f"unknown tool {call.name!r}: call one of {', '.join(sorted(names))}"


def _call_from_obj(obj: Any, tools: Tools = None) -> ParsedCall | str:
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
    return _known(ParsedCall(name=name.strip(), arguments=args), tools)


def _is_call_shaped(obj: Any) -> bool:
    """A decoded JSON value that is meant as a call (even a malformed one), not data that happens to be JSON."""
    if isinstance(obj, list):
        return bool(obj) and all(_is_call_shaped(o) for o in obj)
    if not isinstance(obj, dict):
        return False
    inner = obj["function"] if isinstance(obj.get("function"), dict) else obj
    return "name" in inner and ("arguments" in inner or "parameters" in inner)


def _xml_call(name: str, params: str, tools: Tools) -> ParsedCall | str:
    name = name.strip()
    if not name:
        return "tool call has an empty <function=...> name"
    types = param_types(tools, name)
    args = {k.strip(): typed_value(v, types.get(k.strip())) for k, v in _XML_PARAM_RE.findall(params)}
    return _known(ParsedCall(name=name, arguments=args), tools)


def _parse_xml_call(body: str, tools: Tools = None) -> ParsedCall | str | None:
    """Qwen3-Coder style ``<function=NAME><parameter=K>V</parameter></function>``; None if not that form."""
    m = _XML_FUNC_RE.match(body)
    if not m:
        return None
    return _xml_call(m.group(1), m.group(2), tools)


def _calls_from_json(obj: Any, tools: Tools) -> list[ParsedCall] | str:
    """The calls in a decoded JSON value (one call or a list of calls), or why it is malformed."""
    objs = obj if isinstance(obj, list) else [obj]
    calls: list[ParsedCall] = []
    for o in objs:
        c = _call_from_obj(o, tools)
        if isinstance(c, str):
            return c
        calls.append(c)
    if not calls:
        return "empty list of tool calls"
    return calls


def _parse_block(body: str, tools: Tools = None) -> list[ParsedCall] | str:
    """The calls in one ``<tool_call>`` block, or why it is malformed."""
    xml = _parse_xml_call(body, tools)
    if xml is not None:
        return [xml] if isinstance(xml, ParsedCall) else xml
    text = body.strip()
    if text.startswith("```"):  # a fenced block inside the tags
        text = text.strip("`").removeprefix("json").strip()
    if not text:
        return "empty <tool_call> block"
    try:
        obj, end = json.JSONDecoder().raw_decode(text)
    except (json.JSONDecodeError, RecursionError) as e:
        where = f" ({e.msg} at char {e.pos})" if isinstance(e, json.JSONDecodeError) else ""
        return f"invalid JSON in <tool_call>{where}: {_snippet(text)}"
    rest = text[end:].strip()
    if rest.strip("}]").strip():  # stray closing braces after the call (small models write them) are noise
        return f"unexpected text after the JSON in <tool_call>: {_snippet(rest)}"
    return _calls_from_json(obj, tools)


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


def read_blocks(text: str, tools: Tools = None) -> tuple[list[ParsedCall], list[str], list[str]]:
    """``(calls, errors, kept)`` of the ``<tool_call>`` blocks in ``text``: ``kept`` is the text
    outside well-formed blocks, in order (a malformed block stays in it verbatim)."""
    return _assemble(text, ((s, e, _parse_block(body, tools)) for s, e, body in tool_call_blocks(text)))


Found = tuple[int, int, "list[ParsedCall] | str"]


def _assemble(text: str, found: Iterable[Found]) -> tuple[list[ParsedCall], list[str], list[str]]:
    """Calls, errors and the text kept around them, from ``(start, end, calls or error)`` spans in order."""
    calls: list[ParsedCall] = []
    errors: list[str] = []
    kept: list[str] = []
    last = 0
    for start, end, parsed in found:
        kept.append(text[last:start])
        last = end
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


def _xml_spans(text: str, tools: Tools) -> list[Found]:
    """Qwen3-Coder ``<function=NAME>...</function>`` written without the ``<tool_call>`` wrapper."""
    return [(m.start(), m.end(), _as_list(_xml_call(m.group(1), m.group(2), tools)))
            for m in _XML_BARE_RE.finditer(text)]  # fmt: skip


def _as_list(c: ParsedCall | str) -> list[ParsedCall] | str:
    return [c] if isinstance(c, ParsedCall) else c


def _fenced_spans(text: str, tools: Tools) -> list[Found]:
    """Fenced code blocks (```` ```json ````) whose whole body is a call or a list of calls."""
    found: list[Found] = []
    for m in _FENCE_RE.finditer(text):
        if m.group(1).lower() not in _FENCE_LANGS:
            continue
        body = m.group(2).strip()
        try:
            obj, end = json.JSONDecoder().raw_decode(body)
        except (json.JSONDecodeError, RecursionError):
            continue
        if body[end:].strip() or not _is_call_shaped(obj):
            continue
        found.append((m.start(), m.end(), _calls_from_json(obj, tools)))
    return found


def _bare_spans(text: str, tools: Tools) -> list[Found]:
    """Bare JSON objects that look like calls (a 'name' and 'arguments'/'parameters'), ';' between them eaten.

    Not inside a fenced block of some other language (a Python dict in ```python is code)."""
    decoder = json.JSONDecoder()
    found: list[Found] = []
    code = [m.span() for m in _FENCE_RE.finditer(text) if m.group(1).lower() not in _FENCE_LANGS]
    pos, tries = 0, 0
    while tries < _MAX_BARE_SCAN:
        i = text.find("{", pos)
        if i < 0:
            break
        inside = next((e for s, e in code if s <= i < e), None)
        if inside is not None:  # JSON inside a ```python (or other code) block is code, not a call
            pos = inside
            continue
        try:
            obj, end = decoder.raw_decode(text, i)
        except (json.JSONDecodeError, RecursionError):
            pos, tries = i + 1, tries + 1
            continue
        if _is_call_shaped(obj):
            sep = _SEP_RE.match(text, end)
            found.append((i, sep.end() if sep else end, _as_list(_call_from_obj(obj, tools))))
            if sep:
                end = sep.end()
        pos = end if end > i else i + 1
    return found


def parse_tool_calls(text: str, tools: Tools = None) -> ParsedTurn:
    """Read tool calls out of a completion; never raises (malformed calls become ``errors``).

    ``tools``: the turn's OpenAI tool schemas; given, a call must name one of them.
    """
    try:
        return _parse(text, tools)
    except Exception as e:  # a parser bug must not kill a rollout: report it as a malformed turn
        return ParsedTurn(content=str(text), errors=[f"could not parse the turn: {type(e).__name__}: {e}"])


def _parse(text: str, tools: Tools) -> ParsedTurn:
    text = strip_end(str(text)).replace("<|python_tag|>", "")
    calls, errors, kept = read_blocks(text, tools)
    if not calls and not errors:
        for finder in (_xml_spans, _fenced_spans, _bare_spans):
            found = finder(text, tools)
            if found:
                calls, errors, kept = _assemble(text, found)
                break
    return ParsedTurn(content=join_content(kept), tool_calls=calls, errors=errors)


def join_content(parts: Sequence[str]) -> str:
    """The content: the text outside the calls, trimmed, without reasoning blocks (``<think>...</think>``)."""
    return "\n".join(p.strip() for p in (_THINK_RE.sub("", x) for x in parts) if p.strip())
