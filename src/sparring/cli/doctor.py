"""`sparring doctor`: each isolation feature and dependency, ok / degraded (with the fallback and its
cost) / missing (with the install command). Exit 1 when a required one is missing (no sandbox can start)."""

from __future__ import annotations

import typer
from rich.markup import escape

from sparring.cli.common import JSON_OPT, emit_json, err_console, guarded, out_console

_STYLE = {"ok": "green", "degraded": "yellow", "missing": "red"}
_printed = False


def doctor(json_out: bool = JSON_OPT) -> None:
    """Check bubblewrap, user namespaces, overlayfs, cgroups, seccomp, the exec server, podman, Ray, torch/CUDA,
    the family programs and free disk; say what falls back and what to install."""
    guarded(_doctor)(json_out)


def _doctor(json_out: bool) -> None:
    from sparring.doctor import report, run_checks

    checks = run_checks()
    if json_out:
        emit_json(report(checks))
    else:
        for c in checks:
            out_console.print(
                f"[{_STYLE[c.status]}]{c.status:>8}[/]  {escape(c.line())}", highlight=False, soft_wrap=True
            )
    if any(c.required and c.status == "missing" for c in checks):
        raise typer.Exit(1)


def print_degraded_once(mode: str = "auto") -> None:
    """Print the sandbox fallbacks in force (copy mode, rlimits, Python exec server) on stderr, once per
    process: a run on a machine without root says at its start what isolation it gets."""
    global _printed
    if _printed:
        return
    _printed = True
    from sparring.doctor import sandbox_degradations

    for c in sandbox_degradations(mode):
        err_console.print(
            f"[yellow]degraded:[/] {escape(c.line())} (see `sparring doctor`)",
            highlight=False,
            soft_wrap=True,
        )
