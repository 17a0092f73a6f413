"""`sparring failures list|promote`: the failure-case library over a trajectory store."""

from __future__ import annotations

from pathlib import Path

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from sparring.cli.common import JSON_OPT, emit_json, guarded, out_console
from sparring.errors import ConfigError
from sparring.store.base import TrajQuery
from sparring.trajectory import STATUSES

app = typer.Typer(
    help="Failure-case library: cluster stored failures, promote a cluster.", no_args_is_help=True
)

STORE_OPT = typer.Option(..., "--store", help="Trajectory store (SQLite file) to read.")
RUN_OPT = typer.Option(None, "--run", help="Only this run id.")
TASK_OPT = typer.Option(None, "--task", help="Only this task id.")
FAMILY_OPT = typer.Option(None, "--family", help="Only this task family.")
POLICY_OPT = typer.Option(None, "--policy", help="Only this policy spec.")
STATUS_OPT = typer.Option(None, "--status", help=f"Only this status ({', '.join(STATUSES)}).")


def _query(
    run: str | None, task: str | None, family: str | None, policy: str | None, status: str | None
) -> TrajQuery:
    if status is not None and status not in STATUSES:
        raise ConfigError(f"unknown --status {status!r}: choose from {', '.join(STATUSES)}")
    return TrajQuery(run_id=run, task_id=task, family=family, policy=policy, status=status, limit=None)


@app.command("list")
@guarded
def list_cmd(
    store: Path = STORE_OPT,
    run: str | None = RUN_OPT,
    task: str | None = TASK_OPT,
    family: str | None = FAMILY_OPT,
    policy: str | None = POLICY_OPT,
    status: str | None = STATUS_OPT,
    top: int = typer.Option(20, "--top", help="Show the N biggest clusters."),
    json_out: bool = JSON_OPT,
) -> None:
    """Cluster the stored failures by signature (status, error type, failing tests, flags)."""
    from sparring.store.failures import failures
    from sparring.store.sqlite import SQLiteStore

    if top < 1:
        raise ConfigError("--top must be at least 1")
    q = _query(run, task, family, policy, status)
    with SQLiteStore(store, readonly=True) as s:
        clusters = failures(s, q)
    shown = clusters[:top]
    if json_out:
        emit_json({"clusters": [c.to_json() for c in shown], "total_clusters": len(clusters),
                   "total_failures": sum(c.count for c in clusters)})  # fmt: skip
        return
    table = Table(title=f"{len(clusters)} failure clusters, {sum(c.count for c in clusters)} failures in {store}",
                  title_justify="left", box=box.SIMPLE_HEAD)  # fmt: skip
    for col in ("cluster", "n", "status", "error / failing tests / flags", "tasks", "promote as"):
        table.add_column(col, overflow="fold")
    for c in shown:
        what = c.error_type or ", ".join(c.failing_tests[:4]) or "-"
        if c.flags:
            what += f"  [flags: {', '.join(c.flags)}]"
        tasks = ", ".join(f"{k}×{v}" for k, v in c.tasks.most_common(3))
        table.add_row(
            Text(c.id), str(c.count), Text(c.status), Text(what), Text(tasks), ", ".join(c.promote_as)
        )
    out_console.print(table)


@app.command("promote")
@guarded
def promote_cmd(
    cluster: str = typer.Argument(..., metavar="CLUSTER", help="Cluster id (from `failures list`)."),
    store: Path = STORE_OPT,
    out: Path = typer.Option(..., "--out", help="Directory to write the new tasks or regression cases into."),
    kind: str = typer.Option(
        "tasks", "--as", help="tasks (new tasks from the failed workspaces) or regression."
    ),
    tasks: Path | None = typer.Option(
        None, "--tasks", help="Where the cluster's tasks live (needed for --as tasks)."
    ),
    limit: int = typer.Option(10, "--max", help="At most N tasks / cases."),
    run: str | None = RUN_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Turn a failure cluster into new tasks or regression cases."""
    from sparring.store.failures import members, promote_regression, promote_tasks
    from sparring.store.sqlite import SQLiteStore
    from sparring.tasks.loader import find_tasks

    if kind not in ("tasks", "regression"):
        raise ConfigError(f"unknown --as {kind!r}: choose tasks or regression")
    if limit < 1:
        raise ConfigError("--max must be at least 1")
    if kind == "tasks" and tasks is None:
        raise ConfigError("--as tasks needs --tasks DIR (where the cluster's tasks live)")
    with SQLiteStore(store, readonly=True) as s:
        trajs = members(s, _query(run, None, None, None, None), cluster)
    if kind == "regression":
        doc = {"cluster": cluster, "as": kind, **promote_regression(trajs, out, cluster, limit)}
    else:
        assert tasks is not None
        by_key = {(t.id, t.digest): t for t in find_tasks(tasks)}
        made = promote_tasks(trajs, by_key, out, cluster, limit)
        doc = {"cluster": cluster, "as": kind, "tasks": made}
    if json_out:
        emit_json(doc)
    else:
        out_console.print(doc)
