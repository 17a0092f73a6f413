"""Build a tiny random-init causal LM (and its tokenizer) locally, for tests and the demo.

Nothing is downloaded: the tokenizer is trained on :func:`default_corpus`
(text in the chat template, the tool schemas, code-like snippets) and the
model is a Llama-architecture decoder with random weights. Llama uses rotary
position embeddings, so a long context (agent prompts are long) costs no
parameters; ``max_positions`` only sets the advertised limit.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparring.chat_format import render_assistant, render_prompt

if TYPE_CHECKING:
    from sparring.monitor.progress import Progress

# The environment's tool set, as OpenAI function schemas, for corpus text only
# (the env room owns the real schemas; pass them to default_corpus to cover them).
_CORPUS_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": desc,
            "parameters": {
                "type": "object",
                "properties": {k: {"type": t, "description": d} for k, t, d in props},
                "required": req,
            },
        },
    }
    for name, desc, props, req in [
        (
            "bash",
            "Run a shell command in the workspace.",
            [("command", "string", "The command."), ("timeout", "integer", "Seconds.")],
            ["command"],
        ),
        (
            "read_file",
            "Read lines of a file.",
            [
                ("path", "string", "File path."),
                ("start_line", "integer", "First line."),
                ("end_line", "integer", "Last line."),
            ],
            ["path"],
        ),
        (
            "write_file",
            "Write a whole file.",
            [("path", "string", "File path."), ("content", "string", "New content.")],
            ["path", "content"],
        ),
        (
            "str_replace",
            "Replace one exact occurrence of a string in a file.",
            [
                ("path", "string", "File path."),
                ("old", "string", "Text to find."),
                ("new", "string", "Replacement."),
            ],
            ["path", "old", "new"],
        ),
        ("list_dir", "List a directory.", [("path", "string", "Directory.")], []),
        ("run_tests", "Run the visible tests.", [("args", "string", "Extra pytest args.")], []),
        ("submit", "Submit the workspace for judging; ends the episode.", [], []),
    ]
]

_NAMES = [
    "add",
    "mean",
    "parse_line",
    "count_words",
    "fib",
    "clamp",
    "merge",
    "is_prime",
    "slugify",
    "flatten",
]
_FILES = [
    "solution.py",
    "main.py",
    "utils.py",
    "tests/test_solution.py",
    "data.csv",
    "README.md",
    "setup.cfg",
]
_SNIPPETS = [
    "def {f}(a, b):\n    return a + b\n",
    "def {f}(xs):\n    if not xs:\n        return 0\n    return sum(xs) / len(xs)\n",
    "def {f}(n: int) -> int:\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n",
    "import os\nimport sys\n\n\ndef {f}(path):\n    with open(path) as fh:\n        return [line.strip() for line in fh]\n",
    'class {F}:\n    def __init__(self, value):\n        self.value = value\n\n    def __repr__(self):\n        return f"{F}({{self.value!r}})"\n',
    "from solution import {f}\n\n\ndef test_{f}():\n    assert {f}(1, 2) == 3\n    assert {f}([]) == 0\n",
    "for i in range(10):\n    if i % 2 == 0:\n        print(i)\n    else:\n        continue\n",
    "try:\n    value = int(text)\nexcept ValueError as e:\n    raise SystemExit(f'bad input: {{e}}')\n",
]
_OUTPUTS = [
    "============================= test session starts ==============================\n"
    "collected 3 items\n\ntests/test_solution.py ..F                                    [100%]\n"
    "FAILED tests/test_solution.py::test_{f} - AssertionError: assert 4 == 3\n1 failed, 2 passed in 0.03s",
    "===== 3 passed in 0.02s =====",
    'Traceback (most recent call last):\n  File "solution.py", line 3, in {f}\n    return a + b\n'
    "TypeError: unsupported operand type(s) for +: 'int' and 'str'",
    "solution.py\ntests\nREADME.md",
    "[exit code 0]",
    "[exit code 1]\nbash: line 1: foo: command not found",
    "[output truncated: 2048 of 9000 bytes shown]",
]
_COMMANDS = [
    "ls",
    "cat {p}",
    "python -m pytest -q",
    "grep -n 'def ' {p}",
    "sed -n 1,40p {p}",
    "python {p}",
    "git diff",
    "head -n 20 {p}",
    "wc -l {p}",
    "pip list",
]


_WORDS = [
    "value",
    "result",
    "items",
    "count",
    "index",
    "total",
    "name",
    "path",
    "line",
    "text",
    "data",
    "key",
    "size",
    "start",
    "end",
    "error",
    "config",
    "node",
    "left",
    "right",
    "parent",
    "child",
    "queue",
    "stack",
    "cache",
    "buffer",
    "token",
    "record",
    "row",
    "column",
    "table",
    "user",
    "order",
    "price",
    "amount",
    "number",
    "string",
    "list",
    "dict",
    "tuple",
    "set",
    "file",
    "lines",
    "words",
    "chars",
    "first",
    "last",
    "next",
    "prev",
    "min",
    "max",
    "sum",
    "len",
    "self",
    "other",
    "args",
    "kwargs",
    "options",
    "params",
    "response",
    "request",
    "status",
    "message",
    "output",
    "input",
    "source",
    "target",
]
_KEYWORDS = ["if", "elif", "while", "for", "return", "yield", "assert", "raise", "print", "not", "and", "or"]
_OPS = ["+", "-", "*", "//", "%", "==", "!=", "<", ">", "<=", ">=", "+=", "in", "is"]


def _code(rng: random.Random) -> str:
    """A random Python-looking function: identifiers, operators, calls, literals and indentation."""

    def w() -> str:
        return rng.choice(_WORDS)

    name = "_".join(rng.sample(_WORDS, rng.randint(1, 3)))
    args = ", ".join(rng.sample(_WORDS, rng.randint(0, 3)))
    lines = [f"def {name}({args}):", f'    """Return the {w()} of {w()} {w()}."""']
    for _ in range(rng.randint(2, 8)):
        kind = rng.randrange(6)
        if kind == 0:
            lines.append(f"    {w()} = {w()} {rng.choice(_OPS)} {rng.randint(0, 1000)}")
        elif kind == 1:
            lines.append(f"    {rng.choice(_KEYWORDS[:3])} {w()} {rng.choice(_OPS)} {w()}:")
            lines.append(f"        {w()}.append({w()}[{rng.randint(0, 9)}])")
        elif kind == 2:
            lines.append(f"    for {w()} in range(len({w()})):")
            lines.append(f"        {w()}[{w()}] = {w()}.get({w()!r}, {rng.random():.3f})")
        elif kind == 3:
            lines.append(f"    {w()} = [{w()} for {w()} in {w()} if {w()} {rng.choice(_OPS)} {w()}]")
        elif kind == 4:
            lines.append(f'    raise ValueError(f"bad {w()}: {{{w()}!r}}")')
        else:
            sep = rng.choice(["' '", "','"])
            lines.append(f"    print({w()!r}, {w()}, sep={sep})")
    lines.append(f"    return {w()}")
    return "\n".join(lines) + "\n"


def _tool_call(rng: random.Random, f: str) -> dict[str, Any]:
    p = rng.choice(_FILES)
    snippet = rng.choice(_SNIPPETS).format(f=f, F=f.title().replace("_", ""))
    choice = rng.randrange(7)
    name, args = [
        ("bash", {"command": rng.choice(_COMMANDS).format(p=p)}),
        ("read_file", {"path": p, "start_line": 1, "end_line": rng.randint(5, 80)}),
        ("write_file", {"path": p, "content": snippet}),
        ("str_replace", {"path": p, "old": "return a + b", "new": "return int(a) + int(b)"}),
        ("list_dir", {"path": rng.choice([".", "tests", "src"])}),
        ("run_tests", {"args": rng.choice(["", "-q", "-x", "tests/test_solution.py"])}),
        ("submit", {}),
    ][choice]
    return {
        "id": f"call_{rng.randrange(100)}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }


def _conversation(rng: random.Random, tools: Sequence[dict[str, Any]]) -> str:
    f = rng.choice(_NAMES)
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful software agent. Use the tools to solve the task."},
        {
            "role": "user",
            "content": f"Fix `{f}` in solution.py so that the tests pass. "
            "Success: every test in tests/ passes.",
        },
    ]
    for _ in range(rng.randint(1, 4)):
        calls = [_tool_call(rng, f) for _ in range(rng.choice([1, 1, 1, 2]))]
        thought = rng.choice(
            [
                "",
                "Let me look at the files.",
                "I will run the tests first.",
                f"The bug is in {f}.",
                "Now I check the result.",
            ]
        )
        msgs.append({"role": "assistant", "content": thought, "tool_calls": calls})
        for c in calls:
            out = rng.choice(_OUTPUTS + _SNIPPETS).format(f=f, F=f.title())
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": out})
    final = {
        "role": "assistant",
        "content": "Done.",
        "tool_calls": [
            {"id": "call_99", "type": "function", "function": {"name": "submit", "arguments": "{}"}}
        ],
    }
    return render_prompt(msgs, tools) + render_assistant(final)


def default_corpus(
    tools: Sequence[dict[str, Any]] | None = None, *, n: int = 200, seed: int = 0
) -> list[str]:
    """Deterministic tokenizer-training text: ``n`` template conversations, tool schemas, code."""
    rng = random.Random(seed)
    tools = list(tools) if tools is not None else _CORPUS_TOOLS
    corpus = [_conversation(rng, tools) for _ in range(n)]
    corpus += [json.dumps(t) for t in tools] + [json.dumps(t, indent=2) for t in tools]
    corpus += [_code(rng) for _ in range(4 * n)]
    for f in _NAMES:
        corpus += [s.format(f=f, F=f.title().replace("_", "")) for s in _SNIPPETS]
        corpus += [o.format(f=f) for o in _OUTPUTS]
    return corpus


def build_tiny_model(
    out_dir: str | Path,
    corpus: Iterable[str] | None = None,
    *,
    seed: int = 0,
    vocab_size: int = 2048,
    hidden: int = 64,
    layers: int = 2,
    heads: int = 4,
    max_positions: int = 2048,
    arch: str = "llama",
    copy_pretrain_steps: int = 0,
    progress: Progress | None = None,
) -> Path:
    """Train a tokenizer, make a random-init causal LM (``arch``: ``llama`` or ``qwen2``), save both.

    The result loads offline with ``AutoModelForCausalLM.from_pretrained(out_dir)``
    and ``AutoTokenizer.from_pretrained(out_dir)`` (and ``HFPolicy(out_dir)``);
    the tokenizer carries Sparring's ``chat_template``, so ``apply_chat_template``
    and TRL work on it. Same arguments, same bytes of weights.

    ``copy_pretrain_steps > 0`` then trains the random-init weights on that many
    batches of generic copy exercises over the corpus's words
    (:mod:`sparring.train.pretrain`): the copying a hub model brings from
    pretraining, which a warm start on a few hundred demonstrations otherwise
    finds or misses depending on the seed. Its settings and losses go to
    ``copy_pretrain.json`` in the model directory; ``progress`` follows its steps.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from sparring.errors import ConfigError
    from sparring.train.tokenizer import train_tokenizer

    archs: dict[str, tuple[Any, Any]] = {
        "llama": (LlamaConfig, LlamaForCausalLM),
        "qwen2": (Qwen2Config, Qwen2ForCausalLM),
    }
    if arch not in archs:
        raise ConfigError(f"unknown arch {arch!r}: choose {' or '.join(archs)}")
    if hidden % heads:
        raise ConfigError(f"hidden={hidden} must be a multiple of heads={heads}")
    if copy_pretrain_steps < 0:
        raise ConfigError(f"copy_pretrain_steps={copy_pretrain_steps} must be 0 (off) or more")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    texts = default_corpus() if corpus is None else list(corpus)
    tok = train_tokenizer(texts, vocab_size, out)
    config_cls, model_cls = archs[arch]
    config = config_cls(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=hidden * 4,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=True,
        pad_token_id=tok.pad_token_id,
        eos_token_id=tok.eos_token_id,
        bos_token_id=None,
        initializer_range=0.02,
    )
    torch.manual_seed(seed)
    model = model_cls(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = [tok.eos_token_id, tok.convert_tokens_to_ids("<|end|>")]
    model.save_pretrained(str(out), safe_serialization=True)
    if copy_pretrain_steps:
        _copy_pretrain(out, texts, copy_pretrain_steps, seed, progress)
    return out


def _copy_pretrain(out: Path, corpus: list[str], steps: int, seed: int, progress: Progress | None) -> None:
    """Copy-pretrain the model saved in ``out`` in place; record how in ``out/copy_pretrain.json``."""
    from sparring.policy.hf import HFPolicy
    from sparring.train.pretrain import BATCH_SIZE, LM_SHARE, LR, corpus_words, pretrain_copy

    words = corpus_words(corpus)
    policy = HFPolicy(out, seed=seed)
    # plain text: the generic template conversations and code, never the caller's task data
    texts = default_corpus(seed=seed)
    losses = pretrain_copy(policy, words, steps=steps, seed=seed, texts=texts, progress=progress)
    policy.model.save_pretrained(str(out), safe_serialization=True)
    window = max(1, min(50, steps))
    record = {
        "steps": steps,
        "batch_size": BATCH_SIZE,
        "lr": LR,
        "lm_share": LM_SHARE,
        "seed": seed,
        "words": len(words),
        "loss_first": round(sum(losses[:window]) / window, 4),
        "loss_last": round(sum(losses[-window:]) / window, 4),
    }
    (out / "copy_pretrain.json").write_text(json.dumps(record, indent=2) + "\n")
