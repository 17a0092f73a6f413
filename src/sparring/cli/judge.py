"""`sparring judge`: score a workspace against a task."""

from __future__ import annotations

from pathlib import Path

import typer

from sparring.cli.common import JSON_OPT, emit_json, guarded, not_built, out_console, run_async
from sparring.errors import ConfigError

app = typer.Typer(help="Judge: rewards from real execution.", no_args_is_help=True)


@app.command("score")
@guarded
def score(
    task: Path = typer.Option(..., "--task", help="Task directory."),
    workspace: Path = typer.Option(..., "--workspace", help="The final workspace to score (diffed against the task's initial state)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Apply WORKSPACE's diff to a pristine copy of the task, add the hidden tests, run them, print the reward."""
    from sparring.judge.pytest_judge import PytestJudge
    from sparring.sandbox.local import LocalBackend
    from sparring.sandbox.workspace import tree_diff
    from sparring.tasks.loader import load_task

    t = load_task(task)
    if not workspace.is_dir():
        raise ConfigError(f"--workspace {workspace} is not a directory")
    diff = tree_diff(t.workspace, workspace)
    res = run_async(PytestJudge(LocalBackend()).score(t, diff))
    d = res.to_json()
    d["tests"] = res.tests.model_dump()
    if json_out:
        emit_json(d)
    else:
        out_console.print(f"reward {res.reward:.3f}  components {res.components}  flags {res.flags}")
        out_console.print(f"tests: {res.tests.passed} passed, {res.tests.failed} failed, {res.tests.errors} errors")


@app.command("regress", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
@guarded
def regress() -> None:
    """Replay the golden set and fail on any score change. Planned."""
    not_built("judge regress", 6)
