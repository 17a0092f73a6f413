"""Tool-call formats of common chat models: render -> parse round trips, detection, and no raising."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from model_support import LLAMA31_TEMPLATE, QWEN25_TEMPLATE, QWEN35_TEMPLATE
from sparring.chat_format import CHAT_TEMPLATE, ParsedCall, parse_tool_calls, render_chat
from sparring.chat_format.tool_formats import (
    END_MARKERS,
    TOOL_FORMATS,
    detect_tool_format,
    get_tool_format,
    parse_hermes,
    parse_llama3_json,
    parse_qwen3_coder,
    strip_end,
)

_ident = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True)
# parsers cut a turn at its end-of-turn marker (a special token a model does not write as text)
_text = st.text(max_size=20).filter(lambda s: not any(m in s for m in END_MARKERS))
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), _text)
_value = st.recursive(
    _scalar, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_ident, inner, max_size=3)),
    max_leaves=6,
)  # fmt: skip
_args = st.dictionaries(_ident, _value, max_size=4)
_calls = st.lists(st.builds(ParsedCall, _ident, _args), max_size=3)
_content = st.text(max_size=40).filter(lambda s: not any(c in s for c in "<{}[]"))


def _schema_for(calls: list[ParsedCall]) -> list[dict]:
    """A tool schema declaring each argument's JSON type (what a real tool list gives the XML parser)."""
    kinds = {
        str: "string",
        bool: "boolean",
        int: "integer",
        type(None): "null",
        list: "array",
        dict: "object",
    }
    tools = []
    for c in calls:
        props = {k: {"type": kinds[type(v)]} for k, v in c.arguments.items()}
        tools.append({"type": "function", "function": {"name": c.name, "parameters": {"properties": props}}})
    return tools


@pytest.mark.parametrize("name", sorted(TOOL_FORMATS))
@settings(max_examples=120, deadline=None)
@given(content=_content, calls=_calls)
def test_render_then_parse_round_trips(name, content, calls):
    fmt = get_tool_format(name)
    if name == "qwen3_coder":  # raw string values: they must not contain the closing tags
        bad = ("</parameter>", "</function>", "</tool_call>")
        calls = [c for c in calls if not any(b in json.dumps(c.arguments) for b in bad)]
    if name == "llama3_json" and len(calls) > 1:
        calls = calls[:2]  # several calls are ';'-separated
    text = fmt.render(content, calls)
    parsed = fmt.parse(text, _schema_for(calls))
    assert parsed.errors == []
    assert parsed.tool_calls == calls
    assert parsed.content == content.strip()


def test_qwen3_coder_types_values_by_the_schema_and_json_without_one():
    text = "<tool_call>\n<function=f>\n<parameter=a>\n123\n</parameter>\n<parameter=b>\n[1, 2]\n</parameter>\n</function>\n</tool_call>"
    tools = [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"properties": {"a": {"type": "string"}}}},
        }
    ]
    assert parse_qwen3_coder(text, tools).tool_calls == [ParsedCall("f", {"a": "123", "b": [1, 2]})]
    assert parse_qwen3_coder(text).tool_calls == [ParsedCall("f", {"a": 123, "b": [1, 2]})]


def test_each_parser_reads_what_its_real_template_renders():
    """The hub templates (as shipped) render an assistant tool call; our parser for them reads it back."""
    call = {
        "type": "function",
        "function": {"name": "bash", "arguments": {"command": "ls -la", "timeout": 5}},
    }
    msgs = [{"role": "user", "content": "go"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"properties": {
        "command": {"type": "string"}, "timeout": {"type": "integer"}}}}}]  # fmt: skip
    for template, fmt, turn_start in (
        (QWEN25_TEMPLATE, "hermes", "<|im_start|>assistant"),
        (QWEN35_TEMPLATE, "qwen3_coder", "<|im_start|>assistant\n"),
        (LLAMA31_TEMPLATE, "llama3_json", "<|start_header_id|>assistant<|end_header_id|>\n\n"),
        (CHAT_TEMPLATE, "sparring", "<|assistant|>\n"),
    ):
        text = render_chat(template, msgs, tools, add_generation_prompt=False, bos_token="")
        turn = text.rsplit(turn_start, 1)[1]
        parsed = get_tool_format(fmt).parse(turn, tools)
        assert parsed.tool_calls == [ParsedCall("bash", {"command": "ls -la", "timeout": 5})], (fmt, turn)
        assert parsed.errors == [] and parsed.content == "", (fmt, turn)


def test_detect_tool_format_from_the_template():
    assert detect_tool_format(CHAT_TEMPLATE) == "sparring"
    assert detect_tool_format(QWEN25_TEMPLATE) == "hermes"
    assert detect_tool_format(QWEN35_TEMPLATE) == "qwen3_coder"
    assert detect_tool_format(LLAMA31_TEMPLATE) == "llama3_json"
    assert detect_tool_format("{% for m in messages %}{{ m.content }}{% endfor %}") is None
    assert detect_tool_format(None) is None
    with pytest.raises(ValueError, match="choose one of"):
        get_tool_format("nope")


def test_malformed_calls_are_errors_kept_in_content():
    for parse, bad in (
        (parse_hermes, "<tool_call>\n{not json}\n</tool_call>"),
        (parse_qwen3_coder, "<tool_call>\n<function=f>\n<parameter=a>\n1\n</tool_call>"),
        (parse_llama3_json, '{"name": 3, "parameters": {}}'),
    ):
        parsed = parse("before " + bad + "<|im_end|>")
        assert parsed.tool_calls == [] and len(parsed.errors) == 1, bad
        assert "before" in parsed.content and "<|im_end|>" not in parsed.content


def test_llama_python_tag_and_end_markers():
    text = '<|python_tag|>{"name": "a", "parameters": {"x": 1}}; {"name": "b", "arguments": {}}<|eom_id|>junk'
    parsed = parse_llama3_json(text)
    assert parsed.tool_calls == [ParsedCall("a", {"x": 1}), ParsedCall("b", {})] and parsed.content == ""
    assert strip_end("ok<|eot_id|>later") == "ok"


_noise = st.lists(
    st.one_of(st.text(max_size=15), st.sampled_from(
        ["<tool_call>", "</tool_call>", "<function=", "<parameter=x>", "</parameter>", "</function>",
         "{", "}", '"name"', '"parameters"', '"arguments"', ":", ";", "<|python_tag|>", "<|im_end|>", "\n"])),
    max_size=25,
).map("".join)  # fmt: skip


@pytest.mark.parametrize("name", sorted(TOOL_FORMATS))
@settings(max_examples=150, deadline=None)
@given(text=_noise)
def test_parsers_never_raise(name, text):
    parsed = get_tool_format(name).parse(text)
    assert isinstance(parsed.content, str)
    assert all(
        isinstance(c.name, str) and c.name and isinstance(c.arguments, dict) for c in parsed.tool_calls
    )


@pytest.mark.parametrize("name", ["sparring", "hermes"])
@pytest.mark.parametrize(
    "value",
    ["</tool_call>", "a </tool_call> b </tool_call>", "<tool_call>{}</tool_call>", "x\n</tool_call>\n"],
)
def test_a_closing_tag_inside_an_argument_does_not_cut_the_call(name, value):
    """Found by the round trip above (hypothesis, ci21): a literal ``</tool_call>`` in a JSON string
    ended the block there and the call became an 'invalid JSON' error."""
    calls = [ParsedCall("write_file", {"path": "t.md", "content": value}), ParsedCall("submit", {})]
    text = get_tool_format(name).render("", calls)
    parsed = get_tool_format(name).parse(text, _schema_for(calls))
    assert parsed.errors == [] and parsed.tool_calls == calls and parsed.content == ""
    # a model that writes the tag raw inside the JSON (no escaping) is read the same by the lenient reader
    raw = "".join(
        f'<tool_call>{{"name": "{c.name}", "arguments": {json.dumps(c.arguments)}}}</tool_call>'
        for c in calls
    )
    assert parse_tool_calls(raw).tool_calls == calls and parse_tool_calls(raw).errors == []


def test_a_block_that_is_not_json_still_ends_at_its_first_closing_tag():
    turn = parse_tool_calls(
        '<tool_call>oops</tool_call> then <tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    )
    assert [c.name for c in turn.tool_calls] == ["submit"] and len(turn.errors) == 1
    assert "<tool_call>oops</tool_call>" in turn.content
