"""`sparring report RUN`: reward curve, pass rate per tier and reward histograms to HTML (and PNG)."""

from __future__ import annotations

from pathlib import Path

import typer

from sparring.cli.common import emit_json, err_console, guarded, out_console


def report(
    run: str = typer.Argument(..., help="A run's metrics .jsonl, its workdir, or a run id (with --workdir)."),
    workdir: Path = typer.Option(Path(".sparring/demo"), "--workdir", help="Where to look up a run id."),
    out: Path | None = typer.Option(None, "--out", help="Output directory (default: WORKDIR/reports/RUN)."),
    json_out: bool = typer.Option(
        False, "--json", help="Print one JSON object on stdout; logs go to stderr."
    ),
) -> None:
    """Draw a run's reward curve, pass rate per tier and reward histograms."""
    guarded(_report)(run, workdir, out, json_out)


def _report(run: str, workdir: Path, out: Path | None, json_out: bool) -> None:
    from sparring.monitor.report import find_metrics, write_report

    metrics = find_metrics(run, workdir)
    dest = out or metrics.parent.parent / "reports" / metrics.stem
    res = write_report(metrics, dest)
    err_console.print(f"report: {res['html']} ({res['iterations']} iterations, {len(res['png'])} PNG)")
    if json_out:
        emit_json(res)
    else:
        out_console.print(res["html"])
