"""`sparring serve-env`: Sparring tasks as an OpenEnv-compatible environment server (HTTP and /ws)."""

from __future__ import annotations

import socket
from pathlib import Path

import typer

from sparring.cli.common import BACKEND_OPT, JSON_OPT, emit_json, err_console, guarded, make_cli_backend
from sparring.cli.serve import _is_loopback
from sparring.errors import ConfigError


def serve_env(
    tasks: Path = typer.Option(..., "--tasks", help="A task directory or a directory of tasks."),
    host: str = typer.Option(
        "127.0.0.1", "--host", help="Address to listen on (loopback unless --allow-remote)."
    ),
    port: int = typer.Option(8000, "--port", help="Port to listen on (0 picks a free one)."),
    max_sessions: int = typer.Option(
        64, "--max-sessions", help="Sessions (sandboxes) alive at once; then 503."
    ),
    idle_s: float = typer.Option(600.0, "--idle-s", help="Close sessions idle this many seconds."),
    max_body_kb: int = typer.Option(1024, "--max-body-kb", help="Largest request body; larger ones get 413."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Override the tasks' step budget."),
    backend: str = BACKEND_OPT,
    allow_remote: bool = typer.Option(False, "--allow-remote", help="Allow a non-loopback --host."),
    json_out: bool = JSON_OPT,
) -> None:
    """Serve Sparring environments to remote trainers until SIGINT/SIGTERM (one sandbox per session)."""
    guarded(_serve)(
        tasks, host, port, max_sessions, idle_s, max_body_kb, max_steps, backend, allow_remote, json_out
    )


def _serve(
    tasks: Path, host: str, port: int, max_sessions: int, idle_s: float, max_body_kb: int,
    max_steps: int | None, backend: str, allow_remote: bool, json_out: bool,
) -> None:  # fmt: skip
    if not _is_loopback(host) and not allow_remote:
        raise ConfigError(
            f"--host {host} is not a loopback address: pass --allow-remote to serve beyond this machine"
        )
    if not 0 <= port <= 65535:
        raise ConfigError(f"--port must be in 0..65535 (got {port})")
    if max_sessions < 1 or idle_s <= 0 or max_body_kb < 1:
        raise ConfigError("--max-sessions, --idle-s and --max-body-kb must be positive")
    try:
        import uvicorn

        from sparring.integrations.openenv import ServerLimits, create_app
    except ImportError as e:
        raise ConfigError(
            f"serve-env needs the openenv extra ({e.name} missing): pip install 'sparring[openenv]'"
        ) from None
    from sparring.integrations.tasks import TaskSet

    taskset = TaskSet(tasks, backend=make_cli_backend(backend), max_steps=max_steps)
    limits = ServerLimits(max_sessions=max_sessions, idle_s=idle_s, max_body_bytes=max_body_kb * 1024)
    app = create_app(taskset, limits)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host.strip("[]"), port))
    except OSError as e:
        raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    sock.listen(2048)
    bound = sock.getsockname()[1]
    url = f"http://{host}:{bound}"
    err_console.print(
        f"serving {len(taskset.tasks)} task(s) at {url} (/reset /step /state /ws)", highlight=False
    )
    if json_out:
        emit_json({"url": url, "tasks": len(taskset.tasks), "max_sessions": max_sessions})
    config = uvicorn.Config(app, log_level="warning", ws_max_size=limits.max_body_bytes, lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
