"""`sparring tasks family-bench`: per family, distinct tasks generated and tasks admitted (JSON lines)."""

from __future__ import annotations

import typer

from sparring.cli.common import BACKEND_OPT, emit_json, err_console, guarded, make_cli_backend, run_async
from sparring.errors import ConfigError

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
    backend: str = BACKEND_OPT,
) -> None:
    """Per family: generate N tasks, count distinct ones, run admission on them; one JSON object per family."""
    from sparring.admission.family_bench import run_family_admission
    from sparring.tasks.families import get_family

    fams = [f.strip() for f in families.split(",") if f.strip()]
    if not fams:
        raise ConfigError("--families names no family")
    for f in fams:
        get_family(f)  # an unknown name is a one-line error before any work
    be = make_cli_backend(backend)
    for f in fams:
        with err_console.status(f"{f}: generating {n} tasks and checking {n if admit < 0 else admit}"):
            res = run_async(
                run_family_admission(
                    be,
                    f,
                    n,
                    seed,
                    None if admit < 0 else admit,
                    concurrency,
                    judge_concurrency or None,
                    repeats or None,
                )
            )
        emit_json(res)
