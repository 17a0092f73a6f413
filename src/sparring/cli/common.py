"""Shared CLI plumbing: one-line errors, JSON output, progress on stderr."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from sparring.cli.inert import InertConsole
from sparring.errors import NotBuiltError, SparringError

T = TypeVar("T")


def _console(stderr: bool) -> Console:
    """A console; when it does not write to a terminal (a log file, a pipe) lines are never wrapped (a
    one-line note or a status dict split over lines is unreadable and ungreppable): tables take COLUMNS
    when it is set, else 1000 columns, and text is never folded at that width."""
    c = InertConsole(stderr=stderr)
    if not c.is_terminal:
        c = InertConsole(stderr=stderr, width=None if os.environ.get("COLUMNS") else 1000, soft_wrap=True)
    return c


# Logs, tables and progress go to stderr when --json owns stdout.
err_console = _console(stderr=True)
out_console = _console(stderr=False)

JSON_OPT = typer.Option(False, "--json", help="Print one JSON object on stdout; logs go to stderr.")
BACKEND_OPT = typer.Option(
    "local",
    "--backend",
    help="Sandbox backend: local (bubblewrap) or oci (podman; tasks naming an image need it).",
)


def make_cli_backend(kind: str) -> Any:
    """The sandbox backend ``--backend KIND`` names (its default configuration)."""
    from sparring.sandbox.config import backend_config, make_backend

    return make_backend(backend_config(kind))


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print a one-line error and return the Exit to raise."""
    # The message is text, not rich markup: "pip install 'sparring[report]'" must print as written.
    err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def guarded(fn: Callable[..., T]) -> Callable[..., T]:
    """Turn expected errors into a one-line message and a non-zero exit, never a traceback."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> T:
        try:
            return fn(*args, **kwargs)
        except typer.Exit:
            raise
        except NotBuiltError as e:
            raise fail(f"not built yet: {e}", code=3) from None
        except SparringError as e:
            raise fail(str(e).splitlines()[0] if str(e) else type(e).__name__) from None
        except KeyboardInterrupt:
            raise fail("interrupted", code=130) from None
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as e:
            raise fail(f"{e.strerror or type(e).__name__}: {e.filename}") from None
        except Exception as e:
            if os.environ.get("SPARRING_DEBUG"):
                raise
            raise fail(
                f"internal error: {type(e).__name__}: {e} (set SPARRING_DEBUG=1 for the traceback; please report it)"
            ) from None

    return wrapper


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


def emit_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


ALLOW_UNADMITTED_OPT = typer.Option(
    False,
    "--allow-unadmitted",
    help="Use tasks without an admitting verdict (never checked, or rejected by `sparring tasks check`).",
)
