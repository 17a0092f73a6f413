"""Sparring's chat format, defined once as a Jinja ``chat_template`` (the Hugging Face standard).

:data:`CHAT_TEMPLATE` *is* the format. Sparring's tokenizers and every
checkpoint they are saved with carry it, so ``tokenizer.apply_chat_template(
messages, tools=...)`` (transformers, TRL, vLLM, SGLang) writes exactly the text
that :func:`render_prompt` writes here: both render this one template, here with
a Jinja environment configured as transformers configures its own
(:func:`_environment`; a test holds the two byte-identical). What it renders::

    <|system|>
    {system content}

    # Tools
    Call a tool by writing <tool_call>{"name": NAME, "arguments": {...}}</tool_call>. ...
    - bash(command: string, timeout?: integer): Run a shell command.<|end|>
    <|user|>
    {user content}<|end|>
    <|assistant|>
    {content}
    <tool_call>{"name": "bash", "arguments": {"command": "ls"}}</tool_call><|end|>
    <|tool|>
    {tool output}<|end|>
    <|assistant|>

Every turn is ``<|role|>\\n{body}<|end|>\\n``; the generation prompt is
``<|assistant|>\\n``. A first system message and the tool list share the
leading system turn; a later system message is a system turn of its own. The body of an assistant turn is :func:`render_assistant`
(wrapped in ``{% generation %}`` so transformers can mask assistant tokens), so
the template is prefix-preserving: earlier turns render byte-identically
whatever follows, and for every assistant turn ``i``::

    render_prompt(messages[:i], tools) + render_assistant(messages[i]) + "\\n"
        + "<|assistant|>\\n" == render_prompt(messages[:i + 1], tools)

Role markers (``<|...|>``) inside message text are neutralised (``<|`` becomes
``< |``) so no message can forge a turn boundary; tool-call JSON has every
``<`` escaped as ``\\u003c`` so arguments containing ``</tool_call>`` survive a
round trip. Tool-call ``arguments`` given as a dict are written with ``tojson``;
given as a string (OpenAI's wire form) they are written verbatim, trimmed, as
other hub templates do.

:data:`RESPONSE_TEMPLATE` is the matching transformers ``response_template``
(what ``tokenizer.parse_response`` and TRL read to parse a sampled turn).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
TOOL = "<|tool|>"
END = "<|end|>"
TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"
EOS_TOKEN = "<|endoftext|>"
PAD_TOKEN = "<|pad|>"

ROLE_HEADERS: dict[str, str] = {"system": SYSTEM, "user": USER, "assistant": ASSISTANT, "tool": TOOL}
# Tokens a tokenizer for this template must treat as atomic special tokens.
CHAT_SPECIAL_TOKENS: tuple[str, ...] = (SYSTEM, USER, ASSISTANT, TOOL, END, TOOL_CALL_OPEN, TOOL_CALL_CLOSE)

TOOL_INSTRUCTIONS = (
    'Call a tool by writing <tool_call>{"name": NAME, "arguments": {...}}</tool_call>. '
    "End your turn after your tool calls; their results come back as tool turns."
)

# The template. Whitespace is controlled with {%- -%} everywhere and newlines are written as
# '\n' literals, so the text does not depend on trim_blocks / lstrip_blocks.
CHAT_TEMPLATE = (
    r"""{#- Sparring chat format (sparring.chat_format.template) -#}
{%- macro text(c) -%}
{%- if c is string -%}{{ c }}
{%- elif c is mapping -%}{{ c['text'] if c['text'] is defined else '' }}
{%- elif c is iterable -%}
{%- for p in c -%}{%- if p is string -%}{{ p }}{%- elif p is mapping and p['text'] is defined -%}{{ p['text'] }}{%- endif -%}{%- endfor -%}
{%- elif c -%}{{ c }}
{%- endif -%}
{%- endmacro -%}
{%- macro neutral(c) -%}{{ text(c) | replace('<|', '< |') }}{%- endmacro -%}
{%- macro type_name(s) -%}
{%- if s is not mapping or s['type'] is not defined -%}{%- set t = 'any' -%}{%- else -%}{%- set t = s['type'] -%}{%- endif -%}
{%- if t is not string and t is iterable and t is not mapping -%}{{ t | map('string') | join('|') }}
{%- elif t == 'array' and s['items'] is defined and s['items'] is mapping -%}array[{{ type_name(s['items']) }}]
{%- elif s is mapping and s['enum'] is defined -%}{{ s['enum'] | map('tojson') | join('|') }}
{%- else -%}{{ t }}
{%- endif -%}
{%- endmacro -%}
{%- macro tool_line(tool) -%}
{%- set fn = tool['function'] if tool['function'] is defined and tool['function'] is mapping else tool -%}
{%- set params = fn['parameters'] if fn['parameters'] is defined and fn['parameters'] is mapping else {} -%}
{%- set required = params['required'] if params['required'] is defined and params['required'] else [] -%}
{%- set props = params['properties'] if params['properties'] is defined and params['properties'] is mapping else {} -%}
{%- set desc = (fn['description'] if fn['description'] is defined and fn['description'] is not none else '') | string -%}
- {{ fn['name'] if fn['name'] is defined else '?' }}(
{%- for k, v in props.items() -%}
{{ ', ' if not loop.first else '' }}{{ k }}{{ '' if k in required else '?' }}: {{ type_name(v) }}
{%- endfor -%}
)
{%- if desc.split() -%}: {{ desc.split() | join(' ') }}{%- endif -%}
{%- endmacro -%}
{%- macro call_json(call) -%}
{%- set fn = call['function'] if call['function'] is defined and call['function'] is mapping else call -%}
{%- set args = fn['arguments'] if fn['arguments'] is defined else none -%}
{%- if args is string -%}{%- set args_json = args | trim if args | trim else '{}' -%}
{%- elif args is none -%}{%- set args_json = '{}' -%}
{%- else -%}{%- set args_json = args | tojson -%}
{%- endif -%}
{{ ('{"name": ' ~ ((fn['name'] if fn['name'] is defined and fn['name'] is not none else '') | string | tojson) ~ ', "arguments": ' ~ args_json ~ '}') | replace('<', '\\u003c') }}
{%- endmacro -%}
{%- set ns = namespace(system=[], tools='', parts=[]) -%}
{%- set first_system = messages and messages[0]['role'] == 'system' -%}
{%- if first_system -%}
{%- set s = neutral(messages[0]['content'] if messages[0]['content'] is defined else '') | trim -%}
{%- if s -%}{%- set ns.system = [s] -%}{%- endif -%}
{%- endif -%}
{%- if tools -%}
{%- for tool in tools -%}{%- set ns.tools = ns.tools ~ '\n' ~ tool_line(tool) -%}{%- endfor -%}
{%- set ns.system = ns.system + ['# Tools\n"""
    + TOOL_INSTRUCTIONS.replace("'", "\\'")
    + r"""' ~ ns.tools] -%}
{%- endif -%}
{%- if ns.system -%}<|system|>{{ '\n' }}{{ ns.system | join('\n\n') }}<|end|>{{ '\n' }}{%- endif -%}
{%- for m in messages -%}
{%- if m['role'] == 'assistant' -%}
<|assistant|>{{ '\n' }}
{%- set ns.parts = [] -%}
{%- set content = neutral(m['content'] if m['content'] is defined else '') | trim -%}
{%- if content -%}{%- set ns.parts = [content] -%}{%- endif -%}
{%- if m['tool_calls'] is defined and m['tool_calls'] -%}
{%- for call in m['tool_calls'] -%}{%- set ns.parts = ns.parts + ['<tool_call>' ~ call_json(call) ~ '</tool_call>'] -%}{%- endfor -%}
{%- endif -%}
{%- generation -%}{{ ns.parts | join('\n') }}<|end|>{%- endgeneration -%}
{{ '\n' }}
{%- elif m['role'] == 'system' -%}
{%- if not loop.first -%}<|system|>{{ '\n' }}{{ neutral(m['content'] if m['content'] is defined else '') | trim }}<|end|>{{ '\n' }}{%- endif -%}
{%- else -%}
{{ '<|tool|>' if m['role'] == 'tool' else '<|user|>' }}{{ '\n' }}{{ neutral(m['content'] if m['content'] is defined else '') }}<|end|>{{ '\n' }}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|assistant|>{{ '\n' }}{%- endif -%}
"""
)

# transformers' response_template for this format (tokenizer.parse_response; TRL reads it too).
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": ASSISTANT + "\n",
    "fields": {
        "tool_calls": {
            "open": TOOL_CALL_OPEN,
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|end\|>\s*", "content": "text"},
    },
}


@lru_cache(maxsize=16)
def compile_template(source: str) -> Any:
    """A Jinja template compiled in an environment configured like transformers' own.

    transformers renders chat templates in an ``ImmutableSandboxedEnvironment``
    with ``trim_blocks``, ``lstrip_blocks``, ``loopcontrols``, a ``{% generation %}``
    tag and a ``tojson`` filter that does not HTML-escape; the same here, so a
    template renders the same text in both places.
    """
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class _Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: renders its body (transformers tracks the span)."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    return env.from_string(source)


def render_chat(
    source: str,
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] | None = None,
    *,
    add_generation_prompt: bool = True,
    **extra: Any,
) -> str:
    """Render any chat template as ``apply_chat_template(..., tokenize=False)`` would (no tokenizer needed)."""
    return str(
        compile_template(source).render(
            messages=list(messages),
            tools=list(tools) if tools else None,
            add_generation_prompt=add_generation_prompt,
            **extra,
        )  # fmt: skip
    )


def template_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: tool-call ``arguments`` as objects, not JSON strings.

    OpenAI's wire form carries arguments as a JSON string; hub templates (Qwen,
    Llama...) ``tojson`` them and so expect a dict, the convention vLLM and TRL
    follow too. A string that is not JSON is left as it is.
    """
    out = []
    for m in messages:
        calls = m.get("tool_calls")
        if m.get("role") == "assistant" and calls:
            fixed = []
            for c in calls:
                fn = c.get("function") if isinstance(c, dict) else None
                args = fn.get("arguments") if isinstance(fn, dict) else None
                if isinstance(fn, dict) and isinstance(args, str):
                    with contextlib.suppress(json.JSONDecodeError, RecursionError):
                        c = {**c, "function": {**fn, "arguments": json.loads(args) if args.strip() else {}}}
                fixed.append(c)
            m = {**m, "tool_calls": fixed}
        out.append(m)
    return out


def render_prompt(
    messages: Sequence[dict[str, Any]],
    tools: Sequence[dict[str, Any]] = (),
    *,
    add_generation_prompt: bool = True,
) -> str:
    """The conversation in Sparring's template, by default ending with the ``<|assistant|>\\n`` prompt.

    Exactly ``tokenizer.apply_chat_template(template_messages(messages), tools=tools, tokenize=False,
    add_generation_prompt=...)`` for a Sparring tokenizer (the same text without
    :func:`template_messages` whenever tool-call arguments are dicts or canonical JSON).
    """
    return render_chat(
        CHAT_TEMPLATE, template_messages(messages), tools, add_generation_prompt=add_generation_prompt
    )


def render_assistant(message: dict[str, Any]) -> str:
    """The text an assistant turn is trained to produce: content, tool calls, then ``<|end|>``."""
    text = render_prompt([{**message, "role": "assistant"}], add_generation_prompt=False)
    return text[len(ASSISTANT) + 1 : -1]


def render_tools(tools: Sequence[dict[str, Any]]) -> str:
    """Tools as one line each: ``- name(arg: type, opt?: type): description`` (as the system turn lists them)."""
    module = compile_template(CHAT_TEMPLATE).module
    return "\n".join(str(module.tool_line(t)) for t in tools)


def attach_chat_template(tokenizer: Any) -> Any:
    """Give a tokenizer built for this format its ``chat_template`` and ``response_template`` (in place).

    ``save_pretrained`` then writes both into ``tokenizer_config.json``, so the
    saved directory chats through ``apply_chat_template`` and parses through
    ``parse_response`` (what TRL needs to run tools) in any transformers program.
    """
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


def tool_call_count(messages: Sequence[dict[str, Any]]) -> int:
    """How many tool calls the conversation already holds (to keep generated ids unique)."""
    return sum(len(m.get("tool_calls") or []) for m in messages if m.get("role") == "assistant")
