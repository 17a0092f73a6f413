"""`sparring serve-policy`: a local model behind an OpenAI-compatible chat-completions API."""

from __future__ import annotations

import ipaddress
import signal
import threading
from pathlib import Path
from types import FrameType

import typer

from sparring.cli.common import JSON_OPT, emit_json, err_console, guarded
from sparring.errors import ConfigError


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def serve_policy(
    model: Path = typer.Option(
        ..., "--model", help="A model directory (save_pretrained, with its tokenizer)."
    ),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to listen on (loopback unless --allow-remote)."
    ),
    port: int = typer.Option(8000, "--port", help="Port to listen on (0 picks a free one)."),
    name: str | None = typer.Option(
        None, "--name", help="Model name clients send (default: the model dir's name)."
    ),
    max_new_tokens: int = typer.Option(96, "--max-new-tokens", help="Most tokens one completion may have."),
    seed: int = typer.Option(0, "--seed", help="Policy seed (mixed with each request's seed)."),
    tool_format: str | None = typer.Option(
        None,
        "--tool-format",
        help="Tool-call format of the model (sparring, hermes, qwen3_coder, llama3_json); "
        "default: detected from its chat template.",
    ),
    allow_remote: bool = typer.Option(False, "--allow-remote", help="Allow a non-loopback --host."),
    json_out: bool = JSON_OPT,
) -> None:
    """Serve a local policy over an OpenAI-compatible HTTP API until SIGINT/SIGTERM."""
    guarded(_serve)(model, host, port, name, max_new_tokens, seed, allow_remote, json_out, tool_format)


def _serve(
    model: Path, host: str, port: int, name: str | None, max_new_tokens: int, seed: int,
    allow_remote: bool, json_out: bool, tool_format: str | None = None,
) -> None:  # fmt: skip
    if not _is_loopback(host) and not allow_remote:
        raise ConfigError(
            f"--host {host} is not a loopback address: pass --allow-remote to serve beyond this machine"
        )
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be in 0..65535 (got {port})")
    if max_new_tokens < 1:
        raise ConfigError("--max-new-tokens must be at least 1")

    from sparring.policy.hf import HFPolicy
    from sparring.policy.server import PolicyServer

    policy = HFPolicy(model, max_new_tokens=max_new_tokens, seed=seed, tool_format=tool_format)
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server = PolicyServer(policy, host, port, name=name).start()
        except OSError as e:
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
        try:
            err_console.print(f"serving {server.model_name} at {server.url}", highlight=False, soft_wrap=True)
            if json_out:
                emit_json({"url": server.url, "model": server.model_name})
            while not stop.wait(0.5):
                pass
            err_console.print("stopping", highlight=False)
        finally:
            server.stop()
    finally:
        for s, h in old.items():
            signal.signal(s, h)
