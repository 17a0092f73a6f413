"""Sparring's chat format as a standard Jinja ``chat_template``: transformers and TRL accept it and
render exactly what Sparring renders (one template, two renderers, byte-identical)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparring.chat_format import (
    ASSISTANT,
    CHAT_TEMPLATE,
    END,
    RESPONSE_TEMPLATE,
    parse_tool_calls,
    render_assistant,
    render_prompt,
    template_messages,
)

pytest.importorskip("transformers")

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a  shell\ncommand.",
            "parameters": {
                "type": "object",
                "properties": {
                    "command": {"type": "string"},
                    "timeout": {"type": "integer"},
                    "mode": {"enum": ["a", "b"]},
                    "paths": {"type": "array", "items": {"type": ["string", "null"]}},
                },
                "required": ["command"],
            },
        },
    },
    {"type": "function", "function": {"name": "submit", "description": "", "parameters": {"type": "object"}}},
    {"name": "bare_schema", "description": "A tool given without the {type, function} wrapper."},
]


@pytest.fixture(scope="module")
def tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


_text = st.text(max_size=30)
_args = st.dictionaries(
    st.text(max_size=6), st.one_of(st.integers(), st.text(max_size=10), st.none()), max_size=3
)
_call = st.builds(
    lambda name, args, as_string: {
        "id": "call_0",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args) if as_string else args},
    },
    st.text(min_size=1, max_size=10),
    _args,
    st.booleans(),
)
_message = st.one_of(
    st.fixed_dictionaries({"role": st.sampled_from(["system", "user", "tool"]), "content": _text}),
    st.fixed_dictionaries(
        {"role": st.just("assistant"), "content": st.one_of(st.none(), _text)},
        optional={"tool_calls": st.lists(_call, max_size=2)},
    ),
    st.fixed_dictionaries(
        {
            "role": st.just("user"),
            "content": st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _text}), max_size=2),
        }
    ),
)
_conversation = st.lists(_message, min_size=1, max_size=6)


def test_tokenizer_is_saved_with_the_template(tokenizer):
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert tokenizer.response_template == RESPONSE_TEMPLATE


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(msgs=_conversation, with_tools=st.booleans(), gen=st.booleans())
def test_apply_chat_template_renders_exactly_what_sparring_renders(tokenizer, msgs, with_tools, gen):
    tools = TOOLS if with_tools else None
    ours = render_prompt(msgs, tools or (), add_generation_prompt=gen)
    plain = template_messages(msgs)  # tool-call arguments as objects, as chat templates take them
    theirs = tokenizer.apply_chat_template(plain, tools=tools, tokenize=False, add_generation_prompt=gen)
    assert theirs == ours
    if plain == msgs:  # no JSON-string arguments: the caller's messages themselves render the same
        assert (
            tokenizer.apply_chat_template(msgs, tools=tools, tokenize=False, add_generation_prompt=gen)
            == ours
        )
    ids = tokenizer.apply_chat_template(
        plain, tools=tools, tokenize=True, add_generation_prompt=gen, return_dict=False
    )
    assert ids == tokenizer.encode(ours, add_special_tokens=False)


@settings(max_examples=100, deadline=None)
@given(msgs=_conversation)
def test_template_is_prefix_preserving(msgs):
    """Earlier turns render byte-identically whatever follows (what token-in/token-out relies on)."""
    for k in range(1, len(msgs)):
        head = render_prompt(msgs[:k], TOOLS, add_generation_prompt=False)
        assert render_prompt(msgs, TOOLS).startswith(head)
        if msgs[k - 1]["role"] == "assistant":  # the sampled turn is exactly render_assistant
            assert head.endswith(ASSISTANT + "\n" + render_assistant(msgs[k - 1]) + "\n")


def test_tool_list_and_turns_render_as_documented():
    text = render_prompt([{"role": "user", "content": "hi"}], TOOLS)
    assert (
        '- bash(command: string, timeout?: integer, mode?: "a"|"b", paths?: array[string|null]): Run a shell command.'
        in text
    )
    assert "\n- submit()\n" in text and "- bare_schema(): A tool given without" in text
    assert render_prompt(
        [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    ) == ("<|user|>\nab<|end|>\n<|assistant|>\n")
    # dict arguments and their canonical JSON string render the same; '<' is escaped inside the call
    d = {
        "role": "assistant",
        "tool_calls": [{"function": {"name": "bash", "arguments": {"command": "a</tool_call>"}}}],
    }
    s = {
        "role": "assistant",
        "tool_calls": [{"function": {"name": "bash", "arguments": json.dumps({"command": "a</tool_call>"})}}],
    }
    assert (
        render_assistant(d)
        == render_assistant(s)
        == ('<tool_call>{"name": "bash", "arguments": {"command": "a\\u003c/tool_call>"}}</tool_call>' + END)
    )
    assert parse_tool_calls(render_assistant(d)).tool_calls[0].arguments == {"command": "a</tool_call>"}


def test_trl_tool_calling_checks_pass(tokenizer):
    """TRL's own checks (GRPOTrainer(tools=...) / environment_factory refuse templates that fail them)."""
    pytest.importorskip("trl")
    from trl.chat_template_utils import (
        is_chat_template_prefix_preserving,
        is_chat_template_stop_token_trained,
        supports_tool_calling,
    )

    assert supports_tool_calling(tokenizer)
    assert is_chat_template_prefix_preserving(tokenizer)
    assert is_chat_template_stop_token_trained(tokenizer)  # {% generation %} covers the <|end|> token


def test_parse_response_reads_a_sampled_turn(tokenizer):
    """transformers' response parser (what TRL uses on completions) reads the saved response_template."""
    msg = {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls </tool_call>"}}}
        ],
    }
    prompt = render_prompt([{"role": "user", "content": "go"}], TOOLS)
    completion = tokenizer.encode(render_assistant(msg), add_special_tokens=False)
    parsed = tokenizer.parse_response(completion, prefix=tokenizer.encode(prompt, add_special_tokens=False))
    assert parsed["content"] == "Let me look."
    assert parsed["tool_calls"] == [
        {"type": "function", "function": {"name": "bash", "arguments": {"command": "ls </tool_call>"}}}
    ]


def test_assistant_mask_covers_exactly_the_sampled_turn(tokenizer):
    msgs = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "again"},
    ]
    out = tokenizer.apply_chat_template(
        msgs, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    ids, mask = out["input_ids"], out["assistant_masks"]
    assert tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m]) == "ok" + END


def test_a_saved_policy_checkpoint_chats_through_transformers(tiny_model_dir, tmp_path):
    """Every checkpoint Sparring saves (HFPolicy.save, also for old template-less dirs) carries the template."""
    import shutil

    from transformers import AutoTokenizer

    from sparring.policy.hf import HFPolicy

    old = tmp_path / "old"
    shutil.copytree(tiny_model_dir, old)
    cfg = json.loads((old / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None), cfg.pop("response_template", None)
    (old / "tokenizer_config.json").write_text(json.dumps(cfg))
    (old / "chat_template.jinja").unlink(missing_ok=True)
    assert AutoTokenizer.from_pretrained(str(old)).chat_template is None
    HFPolicy(old).save(tmp_path / "saved")
    tok = AutoTokenizer.from_pretrained(str(tmp_path / "saved"))
    assert tok.chat_template == CHAT_TEMPLATE and tok.response_template == RESPONSE_TEMPLATE
    msgs = [{"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == render_prompt(msgs)
