"""`sparring tasks family-bench`: per family, distinct tasks generated and tasks admitted (a table;
``--json``: one JSON object per family, a line each)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from sparring.cli.common import (
    BACKEND_OPT,
    emit_json,
    guarded,
    make_cli_backend,
    out_console,
    run_async,
)
from sparring.errors import ConfigError

if TYPE_CHECKING:
    from sparring.sandbox.base import SandboxBackend

ALL_FAMILIES = "function-impl,code-repair,data-analysis,shell-ops,sql,tool-use,spreadsheet,service-recovery"


@guarded
def family_bench(
    families: str = typer.Option(ALL_FAMILIES, "--families", help="Comma-separated family names."),
    n: int = typer.Option(200, "--n", min=1, help="Tasks generated per family."),
    seed: int = typer.Option(0, "--seed"),
    admit: int = typer.Option(
        -1,
        "--admit",
        min=-1,
        help="Tasks checked per family: K spread evenly over the N (-1: all N; 0: generate-only count).",
    ),
    concurrency: int = typer.Option(3, "--concurrency", min=1, help="Tasks checked at once."),
    judge_concurrency: int = typer.Option(
        0, "--judge-concurrency", min=0, help="Judge runs in flight at once (0: two per CPU)."
    ),
    repeats: int = typer.Option(0, "--repeats", min=0, help="Reference runs (0: as `tasks check`)."),
    per_seed: int = typer.Option(
        0, "--per-seed", min=0, help="At most M tasks per seed: the N span consecutive seeds (0: one seed)."
    ),
    backend: str = BACKEND_OPT,
    json_out: bool = typer.Option(
        False, "--json", help="One JSON object per family on stdout (a line each)."
    ),
) -> None:
    """Per family: generate N tasks, count distinct ones, run admission on them (--json: one object per family)."""
    from sparring.tasks.families import get_family

    fams = [f.strip() for f in families.split(",") if f.strip()]
    if not fams:
        raise ConfigError("--families names no family")
    for f in fams:
        get_family(f)  # an unknown name is a one-line error before any work
    be = make_cli_backend(backend)
    rows = []
    for f in fams:
        row = _bench_family(be, f, n, seed, admit, concurrency, judge_concurrency, repeats, per_seed)
        rows.append(row)
        if json_out:
            emit_json(row)
    if not json_out:
        out_console.print(_table(rows))


def _table(rows: list[dict[str, Any]]) -> Any:
    from rich.table import Table

    t = Table("family", "generated", "distinct", "checked", "admitted", "rejected by rule", "s/task")
    for r in rows:
        by_rule = ", ".join(f"{k}:{v}" for k, v in sorted(r.get("rejected_by_rule", {}).items())) or "-"
        spt = r.get("seconds_per_task")
        t.add_row(str(r["family"]), str(r["generated"]), str(r["distinct"]), str(r["checked"]),
                  str(r["admitted"]), by_rule, "-" if spt is None else f"{spt:.1f}")  # fmt: skip
    return t


def _bench_family(
    be: SandboxBackend, family: str, n: int, seed: int, admit: int, concurrency: int, judge_concurrency: int,
    repeats: int, per_seed: int = 0,
) -> dict[str, Any]:  # fmt: skip
    """One family's record, with a bar over the tasks checked and a log line per rejected task."""
    from sparring.admission.check import CheckReport
    from sparring.admission.family_bench import run_family_admission
    from sparring.cli.progress import Bars

    sample = None if admit < 0 else admit  # None: check all n
    checking = n if sample is None else min(sample, n)
    rejected = 0
    with Bars() as bars:

        def progress(rep: CheckReport) -> None:
            nonlocal rejected
            bars.advance(family)
            if not rep.ok:
                rejected += 1
                bars.log(f"{family}: {rep.id} rejected ({rejected} so far): {','.join(rep.rules)}")

        bars.log(f"{family}: generating {n} tasks" + (f", then checking {checking}" if checking else ""))
        if checking:
            bars.start(family, checking, f"{family}: admission")
        res = run_async(
            run_family_admission(
                be, family, n, seed, sample, concurrency, judge_concurrency or None,
                repeats or None, on_done=progress, per_seed=per_seed or None,
            )
        )  # fmt: skip
        if checking:
            bars.finish(family)
    return res
