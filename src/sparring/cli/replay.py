"""`sparring traj replay`: re-execute a stored trajectory and report divergence."""

from __future__ import annotations

from pathlib import Path

import typer

from sparring.cli.common import (
    BACKEND_OPT,
    JSON_OPT,
    emit_json,
    guarded,
    make_cli_backend,
    out_console,
    run_async,
)
from sparring.cli.summary import print_summary
from sparring.errors import TaskError


@guarded
def replay_cmd(
    traj_id: str = typer.Argument(..., help="Trajectory id or a unique prefix of it."),
    store: Path = typer.Option(..., "--store", help="SQLite trajectory store."),
    tasks: Path = typer.Option(..., "--tasks", help="Directory holding the trajectory's task."),
    json_out: bool = JSON_OPT,
    backend_kind: str = BACKEND_OPT,
) -> None:
    """Re-execute the recorded tool calls in a fresh sandbox; exit 1 if anything diverges."""
    from sparring.judge.pytest_judge import PytestJudge
    from sparring.rollout.replay import replay, task_of
    from sparring.store.sqlite import SQLiteStore
    from sparring.tasks.loader import find_tasks

    if not store.is_file():
        raise TaskError(f"store not found: {store}")
    st = SQLiteStore(store, readonly=True)
    try:
        traj = st.get(st.resolve_id(traj_id))
    finally:
        st.close()
    task = task_of(traj, find_tasks(tasks), str(tasks))
    backend = make_cli_backend(backend_kind)  # the task's spec names its layer, as in the rollout
    rep = run_async(replay(traj, task, backend, PytestJudge(backend)))
    if json_out:
        emit_json(rep.to_json())
    else:
        print_summary(out_console, rep.to_json(), "replay")
    if not rep.identical:
        raise typer.Exit(1)
