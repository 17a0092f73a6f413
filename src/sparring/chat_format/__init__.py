"""The chat text format: Sparring's Jinja chat template, rendering and tool-call parsing.

It lives outside the rooms (like :mod:`sparring.trajectory`): policies render
with it, the Environment parses sampled text with it, training tokenises with
it, and none of them may import another for it.

- :mod:`.template` — :data:`CHAT_TEMPLATE` (the format, as a Hugging Face
  ``chat_template``), :func:`render_prompt` / :func:`render_assistant` (that
  template, rendered without a tokenizer) and :data:`RESPONSE_TEMPLATE`.
- :mod:`.parse` — :func:`parse_tool_calls`, the lenient any-format reader.
"""

from sparring.chat_format.parse import ParsedCall, ParsedTurn, parse_tool_calls
from sparring.chat_format.template import (
    ASSISTANT,
    CHAT_SPECIAL_TOKENS,
    CHAT_TEMPLATE,
    END,
    EOS_TOKEN,
    PAD_TOKEN,
    RESPONSE_TEMPLATE,
    ROLE_HEADERS,
    SYSTEM,
    TOOL,
    TOOL_CALL_CLOSE,
    TOOL_CALL_OPEN,
    TOOL_INSTRUCTIONS,
    USER,
    attach_chat_template,
    compile_template,
    render_assistant,
    render_chat,
    render_prompt,
    render_tools,
    template_messages,
    tool_call_count,
)

__all__ = [
    "ASSISTANT",
    "CHAT_SPECIAL_TOKENS",
    "CHAT_TEMPLATE",
    "END",
    "EOS_TOKEN",
    "PAD_TOKEN",
    "RESPONSE_TEMPLATE",
    "ROLE_HEADERS",
    "SYSTEM",
    "TOOL",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "TOOL_INSTRUCTIONS",
    "USER",
    "ParsedCall",
    "ParsedTurn",
    "attach_chat_template",
    "compile_template",
    "parse_tool_calls",
    "render_assistant",
    "render_chat",
    "render_prompt",
    "render_tools",
    "template_messages",
    "tool_call_count",
]
