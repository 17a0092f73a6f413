"""TRL's rollout_func shows the tools to a chat template that cannot render them, as hf: does (issue 38)."""

from __future__ import annotations

from types import SimpleNamespace

from sparring.env.tools import tool_schemas
from sparring.integrations.trl import _shown

CHATML = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
TOOLS = tool_schemas(["bash", "submit"], [])
MSGS = [{"role": "system", "content": "Be careful."}, {"role": "user", "content": "List the files."}]


def test_a_template_without_tools_gets_them_in_the_system_prompt():
    call = {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
    msgs, tools = _shown(SimpleNamespace(chat_template=CHATML), [*MSGS, {"role": "assistant", "content": None,
                         "tool_calls": [call]}], TOOLS)  # fmt: skip
    assert tools is None and msgs[0]["content"].startswith("Be careful.")
    assert '"name": "submit"' in msgs[0]["content"] and "<tool_call>" in msgs[0]["content"]
    assert msgs[-1] == {
        "role": "assistant",
        "content": '<tool_call>\n{"name": "bash", "arguments": {"command": "ls"}}\n</tool_call>',
    }


def test_a_template_that_shows_tools_gets_them_as_they_are():
    tok = SimpleNamespace(chat_template="{% if tools %}{{ tools }}{% endif %}" + CHATML)
    assert _shown(tok, MSGS, TOOLS) == (MSGS, TOOLS)
