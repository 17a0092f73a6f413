"""The `sparring` command line: one typer app, one module per command group."""

from __future__ import annotations

import contextlib
from typing import Any

import typer

from sparring import __version__
from sparring.cli import (
    demo,
    failures,
    family_bench,
    image,
    judge,
    model,
    replay,
    report,
    review,
    rollout,
    sandbox,
    serve,
    serve_env,
    tasks,
    train,
    traj,
)
from sparring.cli import doctor as doctor_cli
from sparring.cli import eval as eval_cli

app = typer.Typer(
    name="sparring",
    help="Sparring: agent RL post-training on real execution (sandboxes, tasks, judges, rollouts, GRPO).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(sandbox.app, name="sandbox")
app.add_typer(image.app, name="image")
tasks.app.command("family-bench")(family_bench.family_bench)
app.add_typer(tasks.app, name="tasks")
app.add_typer(judge.app, name="judge")
app.add_typer(review.app, name="review")
traj.app.command("replay")(replay.replay_cmd)
app.add_typer(traj.app, name="traj")
app.command("rollout")(rollout.rollout)
app.command("train")(train.train)
app.command("demo")(demo.demo)


def _version(v: bool) -> None:
    if v:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True)) -> None:
    """Sparring."""


app.command("serve-policy")(serve.serve_policy)
app.command("serve-env")(serve_env.serve_env)
app.command("eval")(eval_cli.eval_cmd)
app.command("report")(report.report)
app.add_typer(failures.app, name="failures")
app.command("doctor")(doctor_cli.doctor)
app.add_typer(model.app, name="model")


def _exception_modules() -> list[object]:
    """Typer >= 0.24 vendors click as ``typer._click``; older versions use click itself."""
    import importlib

    mods: list[Any] = []
    for name in ("typer._click.exceptions", "click.exceptions"):
        with contextlib.suppress(ImportError):
            mods.append(importlib.import_module(name))
    return mods


def main() -> None:
    """Entry point: usage errors (bad option values, missing arguments) are one line too."""
    import sys

    mods = _exception_modules()
    usage = tuple(m.UsageError for m in mods)  # type: ignore[attr-defined]
    aborts = tuple(m.Abort for m in mods if hasattr(m, "Abort"))
    try:
        rv = app(standalone_mode=False)
    except usage as e:
        if type(e).__name__ == "NoArgsIsHelpError" and getattr(e, "ctx", None) is not None:
            sys.stdout.write(e.ctx.get_help() + "\n")
            sys.exit(0)
        where = f" (see `{e.ctx.command_path} --help`)" if getattr(e, "ctx", None) is not None else ""
        sys.stderr.write(f"error: {e.format_message()}{where}\n")
        sys.exit(2)
    except aborts:
        sys.stderr.write("error: aborted\n")
        sys.exit(130)
    sys.exit(rv if isinstance(rv, int) else 0)


if __name__ == "__main__":
    main()
