"""The one tolerant tool-call reader every path uses: each form real models write, strict arguments."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparring.chat_format import ParsedCall, parse_tool_calls
from sparring.chat_format.tool_formats import END_MARKERS, get_tool_format

TOOLS = [
    {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": {
        "command": {"type": "string"}, "timeout": {"type": "integer"}}}}}
    for n in ("bash", "submit")
]  # fmt: skip
LS = ParsedCall("bash", {"command": "ls -la", "timeout": 5})

FORMS = {
    "hermes": '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la", "timeout": 5}}\n</tool_call>',
    "fenced json": 'Run:\n```json\n{"name": "bash", "arguments": {"command": "ls -la", "timeout": 5}}\n```',
    "fenced, no language": '```\n{"name": "bash", "arguments": {"command": "ls -la", "timeout": 5}}\n```',
    "bare json": 'I will list. {"name": "bash", "arguments": {"command": "ls -la", "timeout": 5}}',
    "llama 3.1": '<|python_tag|>{"name": "bash", "parameters": {"command": "ls -la", "timeout": 5}}<|eom_id|>',
    "qwen3-coder xml": (
        "<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n</parameter>\n"
        "<parameter=timeout>\n5\n</parameter>\n</function>\n</tool_call>"
    ),
    "xml, no wrapper": "<function=bash>\n<parameter=command>\nls -la\n</parameter>\n<parameter=timeout>\n5\n</parameter>\n</function>",
    "string arguments": '<tool_call>{"name": "bash", "arguments": "{\\"command\\": \\"ls -la\\", \\"timeout\\": 5}"}</tool_call>',
    "openai shape": '{"type": "function", "function": {"name": "bash", "arguments": {"command": "ls -la", "timeout": 5}}}',
}


@pytest.mark.parametrize("form", sorted(FORMS))
def test_every_form_real_models_write_is_one_call(form):
    parsed = parse_tool_calls(FORMS[form], TOOLS)
    assert parsed.tool_calls == [LS] and parsed.errors == [], parsed
    assert "bash" not in parsed.content and "{" not in parsed.content


def test_several_llama_calls_separated_by_semicolons():
    text = '{"name": "bash", "parameters": {"command": "ls"}}; {"name": "submit", "parameters": {}}'
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.tool_calls == [ParsedCall("bash", {"command": "ls"}), ParsedCall("submit", {})]
    assert parsed.content == ""


def test_a_fenced_list_of_calls():
    text = '```json\n[{"name": "bash", "arguments": {"command": "ls"}}, {"name": "submit", "arguments": {}}]\n```'
    assert [c.name for c in parse_tool_calls(text, TOOLS).tool_calls] == ["bash", "submit"]


def test_fenced_code_that_is_not_a_call_stays_content():
    for text in (
        "```bash\nls -la\n```",
        '```json\n{"a": 1}\n```',
        '```python\n{"name": "x", "arguments": {}}\n```',
    ):
        parsed = parse_tool_calls(text, TOOLS)
        assert parsed.tool_calls == [] and parsed.errors == [] and parsed.content == text.strip()


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "bash", "arguments": [1, 2]}</tool_call>',
        '<tool_call>{"name": "bash", "arguments": "ls"}</tool_call>',
        '```json\n{"name": "bash", "arguments": 3}\n```',
        '{"name": "bash", "parameters": "ls -la"}',
    ],
)
def test_arguments_must_be_an_object(text):
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.tool_calls == [] and len(parsed.errors) == 1
    assert "bash" in parsed.errors[0] and text.strip() in parsed.content


def test_a_name_outside_the_tools_is_an_error_naming_the_tools():
    for text in (
        '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>',
        '{"name": "rm_rf", "arguments": {}}',
        "<function=rm_rf>\n</function>",
    ):
        parsed = parse_tool_calls(text, TOOLS)
        assert parsed.tool_calls == [] and parsed.errors == ["unknown tool 'rm_rf': call one of bash, submit"]
        assert parse_tool_calls(text).tool_calls == [ParsedCall("rm_rf", {})]  # no tools given: any name


def test_stray_closing_braces_after_a_tagged_call_are_noise_but_other_text_is_not():
    ok = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}}\n</tool_call>'  # recorded from SmolLM2
    assert parse_tool_calls(ok, TOOLS).tool_calls == [ParsedCall("bash", {"command": "ls"})]
    bad = '<tool_call>{"name": "bash", "arguments": {"command": "ls"}} rm -rf</tool_call>'
    assert parse_tool_calls(bad, TOOLS).errors == ["unexpected text after the JSON in <tool_call>: rm -rf"]


def test_xml_values_are_typed_by_the_tool_schema():
    text = "<function=bash>\n<parameter=command>\n123\n</parameter>\n<parameter=timeout>\n7\n</parameter>\n</function>"
    assert parse_tool_calls(text, TOOLS).tool_calls == [ParsedCall("bash", {"command": "123", "timeout": 7})]


def test_reasoning_is_not_content():
    text = '<think>should I?</think>Yes.<tool_call>{"name": "submit", "arguments": {}}</tool_call>'
    parsed = parse_tool_calls(text, TOOLS)
    assert parsed.content == "Yes." and parsed.tool_calls == [ParsedCall("submit", {})]


# --------------------------------------------------------------------------- properties

_ident = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,11}", fullmatch=True)
_text = st.text(max_size=20).filter(lambda s: not any(m in s for m in END_MARKERS))
_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), _text)
_value = st.recursive(
    _scalar, lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(_ident, inner, max_size=3)),
    max_leaves=6,
)  # fmt: skip
_calls = st.lists(
    st.builds(ParsedCall, _ident, st.dictionaries(_ident, _value, max_size=4)), min_size=1, max_size=3
)
_content = st.text(max_size=40).filter(lambda s: not any(c in s for c in "<{}[]`;"))


def _fenced(content: str, calls: list[ParsedCall]) -> str:
    body = json.dumps([{"name": c.name, "arguments": c.arguments} for c in calls])
    return f"{content}\n```json\n{body}\n```"


def _bare(content: str, calls: list[ParsedCall]) -> str:
    return content + " " + " ".join(json.dumps({"name": c.name, "arguments": c.arguments}) for c in calls)


_WRITERS = {
    "hermes": get_tool_format("hermes").render,
    "sparring": lambda content, calls: get_tool_format("sparring").render(content, calls),
    "llama3_json": get_tool_format("llama3_json").render,
    "fenced": _fenced,
    "bare": _bare,
}


def _schemas(calls: list[ParsedCall]) -> list[dict]:
    return [{"type": "function", "function": {"name": c.name, "parameters": {}}} for c in calls]


@pytest.mark.parametrize("writer", sorted(_WRITERS))
@settings(max_examples=80, deadline=None)
@given(content=_content, calls=_calls)
def test_whatever_form_a_model_uses_the_calls_come_back(writer, content, calls):
    parsed = parse_tool_calls(_WRITERS[writer](content, calls), _schemas(calls))
    assert parsed.errors == [] and parsed.tool_calls == calls
    assert parsed.content == content.strip()


_noise = st.lists(
    st.one_of(st.text(max_size=15), st.sampled_from(
        ["<tool_call>", "</tool_call>", "<function=", "<function=bash>", "<parameter=x>", "</parameter>",
         "</function>", "```json\n", "```", "{", "}", "[", "]", '"name"', '"bash"', '"parameters"',
         '"arguments"', ":", ";", ",", "<|python_tag|>", "<think>", "\n"])),
    max_size=30,
).map("".join)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(text=_noise, with_tools=st.booleans())
def test_the_reader_never_raises_and_accepts_only_well_formed_calls(text, with_tools):
    parsed = parse_tool_calls(text, TOOLS if with_tools else None)
    assert isinstance(parsed.content, str) and all(isinstance(e, str) and e for e in parsed.errors)
    for c in parsed.tool_calls:
        assert isinstance(c.arguments, dict) and c.name
        assert not with_tools or c.name in ("bash", "submit")
