"""`sparring report RUN`: a run's static report site (charts, alerts, trajectory pages)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from sparring.cli.common import emit_json, err_console, guarded, out_console
from sparring.errors import StoreError


def report(
    run: str = typer.Argument(..., help="A run's workdir, its metrics .jsonl, or a run id (with --workdir)."),
    workdir: Path = typer.Option(Path(".sparring/demo"), "--workdir", help="Where to look up a run id."),
    out: Path | None = typer.Option(None, "--out", help="Output directory (default: WORKDIR/reports/RUN)."),
    control: str | None = typer.Option(
        None,
        "--control",
        help="The --no-rl control run (workdir or metrics file): its held-out numbers are drawn too.",
    ),
    max_trajectories: int = typer.Option(
        2000, "--max-trajectories", help="Trajectory pages written (newest first; 0: none)."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print one JSON object on stdout; logs go to stderr."
    ),
) -> None:
    """Write index.html (opens offline) with every chart of a run, its alerts and its trajectory pages."""
    guarded(_report)(run, workdir, out, control, max_trajectories, json_out)


def _report(
    run: str, workdir: Path, out: Path | None, control: str | None, max_trajectories: int, json_out: bool
) -> None:
    from sparring.cli.pages import decoder, load_trajectories, run_summary
    from sparring.monitor.report import find_metrics, write_report
    from sparring.monitor.trajpages import write_site
    from sparring.store.base import TrajQuery

    def warn(line: str) -> None:
        err_console.print(f"warning: {line}", markup=False, highlight=False, soft_wrap=True)

    metrics = find_metrics(run, workdir)
    run_id = metrics.stem
    dest = out or metrics.parent.parent / "reports" / run_id
    store = metrics.parent.parent / "store.db"
    summary: dict[str, Any] = {}
    traj_link = None
    # The charts come from the metrics log: a store that cannot be read costs the trajectory pages
    # and the stored summary, not the report.
    try:
        summary = run_summary(store, run_id)
        if store.is_file() and max_trajectories > 0:
            runs = [run_id, f"{run_id}-teacher", f"{run_id}-heldout-before", f"{run_id}-heldout-after"]
            trajs = load_trajectories(store, [TrajQuery(run_id=r, limit=max_trajectories) for r in runs])
            trajs = trajs[:max_trajectories]
            if trajs:
                write_site(
                    trajs, dest / "trajectories", f"Trajectories of {run_id}", "../index.html", decoder(trajs)
                )
                traj_link = "trajectories/index.html"
    except StoreError as e:
        warn(f"{str(e).splitlines()[0]}; the report is drawn from the metrics only (no trajectory pages)")
    res = write_report(
        metrics, dest,
        control=find_metrics(control) if control else None,
        heldout=summary.get("heldout"), alerts=summary.get("alerts"), traj_link=traj_link, warn=warn,
    )  # fmt: skip
    err_console.print(
        f"report: {res['html']} ({res['iterations']} iterations, {len(res['charts'])} charts, {len(res['png'])} PNG)",
        soft_wrap=True,
    )
    if json_out:
        emit_json(res)
    else:
        out_console.print(res["html"], soft_wrap=True)
