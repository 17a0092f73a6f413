"""`sparring tasks`: generate, import, check, list and show tasks."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from sparring.cli.common import (
    BACKEND_OPT,
    JSON_OPT,
    emit_json,
    err_console,
    guarded,
    make_cli_backend,
    out_console,
    run_async,
)
from sparring.errors import ConfigError

if TYPE_CHECKING:
    from sparring.judge.base import Judge
    from sparring.tasks.loader import Task

app = typer.Typer(help="Task library: generate families, admission checks, listing.", no_args_is_help=True)


# Spelled out so `--help` needs no generator imported; a test keeps it equal to the registry.
FAMILY_NAMES = (
    "code-repair, data-analysis, function-impl, service-recovery, shell-look, shell-look-deep, shell-ops, "
    "spreadsheet, sql, tool-use"
)


@app.command("generate")
@guarded
def generate(
    family: str = typer.Argument(..., help=f"Family name: one of {FAMILY_NAMES}."),
    n: int = typer.Option(..., "--n", help="How many tasks."),
    seed: int = typer.Option(0, "--seed", help="Seed: the same seed gives the same tasks."),
    out: Path = typer.Option(..., "--out", help="Directory to write task directories into."),
    check_: bool = typer.Option(
        True,
        "--check/--no-check",
        help="Admit what is written (as `tasks check`; verdicts in admission.json): rollout, eval and train "
        "use admitted tasks only. --no-check writes unchecked tasks.",
    ),
    backend: str = BACKEND_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Generate N tasks of FAMILY deterministically from SEED, and admit them (verdicts in admission.json)."""
    from sparring.cli.progress import bar_while
    from sparring.tasks.families import check_n, get_family
    from sparring.tasks.families import generate as gen
    from sparring.tasks.loader import TASK_FILE

    get_family(family), check_n(n)  # bad input is a one-line error before any progress line
    # Generators write one task directory after another: the bar follows the task files that appear.
    before = {p.parent for p in out.glob(f"*/{TASK_FILE}")} if out.is_dir() else set()
    count = lambda: sum(1 for p in out.glob(f"*/{TASK_FILE}") if p.parent not in before)  # noqa: E731
    with bar_while(f"generating {family} tasks", n, count):
        tasks = gen(family, n, seed, out)
    admitted: dict[str, bool | None] = {t.digest: None for t in tasks}
    if check_:
        admitted = _admit_generated(tasks, backend)
    rejected = sum(1 for v in admitted.values() if v is False)
    if json_out:
        emit_json(
            {
                "family": family,
                "out": str(out),
                "tasks": [{"id": t.id, "digest": t.digest, "path": str(t.path), "admitted": admitted[t.digest]}
                          for t in tasks],
                "rejected": rejected,
            }
        )  # fmt: skip
    else:
        verdict = f": {len(tasks) - rejected} admitted, {rejected} rejected" if check_ else " (not checked)"
        err_console.print(f"wrote {len(tasks)} tasks to {out}{verdict}")


def _admit_generated(tasks: list[Task], backend: str) -> dict[str, bool | None]:
    """Check each generated task (verdicts cached by digest and judge version); one line per reject."""
    from sparring.admission.check import REFERENCE_RUNS, CheckReport, check_tasks, record_result
    from sparring.admission.gate import admission_judge_version, lookup, verdict_of
    from sparring.cli.progress import Bars

    jv = admission_judge_version()
    out = {t.digest: verdict_of(t, lookup(t, jv), jv).ok for t in tasks}
    todo = [t for t in tasks if out[t.digest] is None]
    by_digest = {t.digest: t for t in todo}
    judge = _judge(backend)
    with Bars() as bars:
        bars.start("check", len(todo), "admitting tasks")

        def done(rep: CheckReport) -> None:
            record_result(by_digest[rep.digest], rep, REFERENCE_RUNS, judge.version)
            out[rep.digest] = rep.ok
            bars.advance("check")
            if not rep.ok:
                bars.log(f"rejected {rep.id}: {', '.join(rep.rules)} (kept, marked in admission.json)")

        if todo:
            run_async(check_tasks(todo, judge, repeats=REFERENCE_RUNS, on_done=done))
        bars.finish("check")
    return out


@app.command("new")
@guarded
def new(
    path: Path = typer.Argument(..., help="Directory to create (must not exist, or be empty)."),
    task_id: str | None = typer.Option(None, "--id", help="Task id (default: the directory's name)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Write a small working example task (a bug, visible and hidden tests, the solution, pinned digest)
    that `sparring tasks check` admits as written: a starting point for your own."""
    from sparring.tasks.template import new_task

    t = new_task(path, task_id)
    files = sorted(p.relative_to(t.path).as_posix() for p in t.path.rglob("*") if p.is_file())
    if json_out:
        emit_json({"id": t.id, "path": str(t.path), "digest": t.digest,
                   "workspace_digest": t.spec.workspace_digest, "files": files})  # fmt: skip
    else:
        for f in files:
            out_console.print(f"  {f}", highlight=False)
        err_console.print(
            f"wrote task {t.id} to {path}; after editing it, run `sparring tasks pin {path}` then "
            f"`sparring tasks check {path}`",
            highlight=False,
        )


@app.command("pin")
@guarded
def pin(
    paths: list[Path] = typer.Argument(..., help="Task directories or directories of tasks."),
    json_out: bool = JSON_OPT,
) -> None:
    """Write each task's workspace_digest into its task.toml after edits of workspace/ (admission rejects a
    stale pin), and say which changed. Only that line of task.toml is rewritten."""
    from sparring.tasks.pin import pin_task
    from sparring.tasks.selection import load_each

    tasks, broken = load_each(paths)
    if broken:
        d, e = broken[0]
        raise e  # nothing is written while any task does not load
    pins = [pin_task(t.path) for t in tasks]
    if json_out:
        emit_json({"tasks": [p.to_json() for p in pins], "changed": sum(p.changed for p in pins)})
    else:
        for p in pins:
            was = "unpinned" if p.previous is None else p.previous[:19]
            what = f"pinned {p.workspace_digest[:19]} (was {was})" if p.changed else "unchanged"
            out_console.print(f"{p.id}: {what}", highlight=False)


@app.command("check")
@guarded
def check(
    refs: list[str] = typer.Argument(
        ...,
        help="Task directories, directories of tasks, or library refs (id, id@version, sha256:digest, prefix).",
        metavar="REF...",
    ),
    library: Path | None = typer.Option(
        None, "--library", help="Task library for refs (default: $SPARRING_TASK_LIBRARY or ./task-library)."
    ),
    repeats: int = typer.Option(
        0,
        "--repeats",
        min=0,
        help="Runs of the reference solution (any failure rejects; 0: enough to catch a test failing "
        "half the time with probability 0.999).",
    ),
    concurrency: int = typer.Option(3, "--concurrency", min=1, help="Tasks checked at once."),
    judge_concurrency: int = typer.Option(
        0, "--judge-concurrency", min=0, help="Judge runs in flight at once (0: two per CPU)."
    ),
    store: bool = typer.Option(
        True, "--store/--no-store", help="Write each result to admission.json beside task.toml."
    ),
    backend: str = BACKEND_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Admission: reject tasks that are vague, unstable, already solved, unsolvable, flaky or hackable.

    Each result is written to admission.json as soon as its task is checked, so an interrupted run
    keeps what it finished. Without a terminal, one progress line per task goes to stderr.
    """
    from sparring.admission.check import REFERENCE_RUNS, CheckReport, check_tasks, record_result, unloadable
    from sparring.tasks.selection import load_each, resolve_refs

    tasks, broken = load_each(resolve_refs(refs, library))
    repeats = repeats or REFERENCE_RUNS
    judge = _judge(backend)
    by_digest = {t.digest: t for t in tasks}
    from sparring.cli.progress import Bars

    with Bars() as bars:
        bars.start("check", len(tasks), "checking tasks")
        done = [0, 0]

        def progress(rep: CheckReport) -> None:
            done[0] += 1
            done[1] += 0 if rep.ok else 1
            t = by_digest[rep.digest]
            if store:
                record_result(t, rep, repeats, judge.version)
            bars.advance("check")
            if not rep.ok or not bars.live:
                verdict = "ok" if rep.ok else "rejected " + ",".join(rep.rules)
                bars.log(f"checked {done[0]}/{len(tasks)} ({done[1]} rejected): {rep.id} {verdict}")

        reports = run_async(
            check_tasks(
                tasks,
                judge,
                repeats=repeats,
                concurrency=concurrency,
                on_done=progress,
                judge_concurrency=judge_concurrency or None,
            )
        )
        bars.finish("check")
    items = [r.to_json() for r in [*reports, *(unloadable(d.name, e) for d, e in broken)]]
    if json_out:
        emit_json({"tasks": items})
    else:
        for it in items:
            mark = "[green]ok[/]" if it["ok"] else "[red]rejected[/]"
            out_console.print(f"{mark} {it['id']}")
            for p in it["problems"]:
                out_console.print(f"    {p['rule']}: {p['detail']}")
    if not all(it["ok"] for it in items):
        raise typer.Exit(1)


def _judge(backend: str = "local") -> Judge:
    """The pytest judge; each task's sandbox spec names its pinned layer, so every task is judged in it."""
    from sparring.judge.pytest_judge import PytestJudge

    return PytestJudge(make_cli_backend(backend))


PATHS_OR_LIBRARY_ARG = typer.Argument(
    None, help="Task directories or directories of tasks (default: the library)."
)


def _paths_or_library(paths: list[Path] | None, library: Path | None) -> list[Task]:
    from sparring.tasks.selection import tasks_or_library

    return tasks_or_library(paths, library)


LIBRARY_OPT = typer.Option(
    None, "--library", help="Task library directory (default: $SPARRING_TASK_LIBRARY or ./task-library)."
)


def _row(t: Task) -> dict[str, Any]:
    from sparring.curriculum.difficulty import load_difficulty
    from sparring.tasks.loader import load_admission

    adm = load_admission(t)
    measured = load_difficulty(t) or {}
    return {
        "id": t.id,
        "version": t.spec.version,
        "family": t.spec.family,
        "difficulty": t.spec.difficulty,
        "measured_tier": measured.get("measured_tier"),
        "pass_rate": measured.get("pass_rate"),
        "digest": t.digest,
        "admitted": None if adm is None else bool(adm.get("ok")),
        "path": str(t.path),
    }


@app.command("list")
@guarded
def list_cmd(
    path: Path | None = typer.Argument(None, help="A directory of tasks (default: the task library)."),
    library: Path | None = LIBRARY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """List tasks (every version side by side) with their digest, difficulty and admission status."""
    from sparring.tasks.loader import find_tasks
    from sparring.tasks.selection import library_tasks

    tasks = find_tasks(path) if path is not None else library_tasks(library)
    rows = [_row(t) for t in tasks]
    if json_out:
        emit_json({"total": len(rows), "tasks": rows})
    else:
        from rich.table import Table

        tb = Table("id", "version", "family", "difficulty", "admitted", "digest")
        for r in rows:
            adm = {None: "-", True: "yes", False: "no"}[r["admitted"]]
            tb.add_row(r["id"], str(r["version"]), r["family"], str(r["difficulty"]), adm, r["digest"][:19])
        out_console.print(tb)


@app.command("show")
@guarded
def show(
    ref: str = typer.Argument(
        ..., help="A task directory, or id, id@version, digest or digest prefix in the library."
    ),
    library: Path | None = LIBRARY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Show one task: spec, digest, admission result and the versions the library holds."""
    from sparring.tasks.loader import TASK_FILE, load_admission, load_task
    from sparring.tasks.registry import Registry, default_library

    reg = Registry(library or default_library())
    t = load_task(ref) if (Path(ref) / TASK_FILE).is_file() else reg.resolve(ref)
    versions = (
        [{"version": v.spec.version, "digest": v.digest} for v in reg.versions(t.id)]
        if reg.root.is_dir()
        else []
    )
    d = {
        "digest": t.digest,
        "path": str(t.path),
        **t.spec.model_dump(mode="json"),
        "admission": load_admission(t),
        "versions": versions,
    }
    if json_out:
        emit_json(d)
    else:
        out_console.print_json(data=d)


@app.command("add")
@guarded
def add(
    paths: list[Path] = typer.Argument(..., help="Task directories or directories of tasks."),
    library: Path | None = LIBRARY_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Add tasks to the library as new versions (a version's bytes never change; re-adding is a no-op)."""
    from sparring.tasks.loader import find_tasks
    from sparring.tasks.registry import Registry, default_library

    tasks = []
    for p in paths:
        tasks += find_tasks(p)  # every task loads before anything is written
    reg = Registry(library or default_library())
    added, same = reg.add(tasks)
    brief = [{"id": t.id, "version": t.spec.version, "digest": t.digest, "path": str(t.path)} for t in added]
    if json_out:
        emit_json({"library": str(reg.root), "added": brief, "unchanged": len(same)})
    else:
        err_console.print(f"added {len(added)} task versions to {reg.root} ({len(same)} already there)")


@app.command("import")
@guarded
def import_cmd(
    file: Path = typer.Argument(
        ..., help="The dataset file to import (a task directory, or a directory of them, for terminal-bench)."
    ),
    fmt: str = typer.Option(
        ..., "--format", help="Input format: function-jsonl, swe-bench, terminal-bench (harbor)."
    ),
    out: Path = typer.Option(..., "--out", help="Directory to write task directories into."),
    limit: int | None = typer.Option(
        None, "--limit", help="Import only the first N records (all are validated)."
    ),
    repos: Path | None = typer.Option(
        None,
        "--repos",
        help="swe-bench: a git repository (or .tar.gz of one) for every instance, or a directory holding "
        "<owner>__<name> or <name> per repo. Nothing is downloaded.",
    ),
    image_template: str | None = typer.Option(
        None,
        "--image-template",
        help="swe-bench: each instance's image instead of --repos, with {instance_id} in it (lower case, '__' as "
        "'_1776_', as SWE-bench names them), e.g. 'REG/sweb.eval.x86_64.{instance_id}:latest'. Pulled into the "
        "image store and pinned by digest; a loopback registry over plain HTTP.",
    ),
    image_workspace: str = typer.Option(
        "/testbed",
        "--image-workspace",
        help="swe-bench with --image-template: the repository's place in the image.",
    ),
    build: bool | None = typer.Option(
        None,
        "--build/--no-build",
        help="terminal-bench / harbor: build each Dockerfile with buildah (its RUN steps run) into the image "
        "store and pin the task to the image's digest (the default where buildah is installed); "
        "--no-build maps it onto a Python layer instead.",
    ),
    backend: str = BACKEND_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Import tasks from a dataset: function-jsonl (task_id, prompt, canonical_solution, test, entry_point),
    swe-bench (instances + local repositories) or terminal-bench / harbor (task directories)."""
    from sparring.tasks.dynamic_format import DYNAMIC_FILE
    from sparring.tasks.importers import NEEDS_BACKEND, import_tasks
    from sparring.tasks.importers.batch import RecordErrors

    if build is None:
        build = fmt in NEEDS_BACKEND and shutil.which("buildah") is not None
        if fmt in NEEDS_BACKEND and not build:
            err_console.print("note: buildah is not installed, so each Dockerfile is mapped onto a Python "
                              "layer, not built (apt-get install buildah to build it)")  # fmt: skip
    try:
        tasks = import_tasks(fmt, file, out, limit=limit, repos=repos, build=build, image_template=image_template,
                             image_workspace=image_workspace,
                             backend=make_cli_backend(backend) if fmt in NEEDS_BACKEND else None)  # fmt: skip
    except RecordErrors as e:
        for line in e.problems:
            err_console.print(line, markup=False, highlight=False)
        raise
    dynamic = {t.id: (t.hidden / DYNAMIC_FILE).is_file() for t in tasks}
    without = sum(1 for v in dynamic.values() if not v) if fmt == "function-jsonl" else 0
    if json_out:
        emit_json(
            {
                "format": fmt,
                "out": str(out),
                "tasks": [{"id": t.id, "digest": t.digest, "path": str(t.path), "dynamic_tests": dynamic[t.id]}
                          for t in tasks],
                "without_dynamic_tests": without,
            }
        )  # fmt: skip
    else:
        note = (f" ({without} without generated tests: no `assert candidate(<literals>) == <literal>` "
                "in their test)") if without else ""  # fmt: skip
        err_console.print(f"imported {len(tasks)} tasks to {out}{note}")


@app.command("difficulty")
@guarded
def difficulty_cmd(
    paths: list[Path] = PATHS_OR_LIBRARY_ARG,
    library: Path | None = LIBRARY_OPT,
    from_store: Path = typer.Option(..., "--from-store", help="Trajectory store (SQLite) to measure from."),
    policy: str | None = typer.Option(None, "--policy", help="Count only this policy's rollouts."),
    min_rollouts: int = typer.Option(
        4, "--min-rollouts", min=1, help="Fewer judged rollouts than this: a pass rate but no tier."
    ),
    write: bool = typer.Option(True, "--write/--dry-run", help="Write difficulty.json beside task.toml."),
    json_out: bool = JSON_OPT,
) -> None:
    """Measure each task's pass rate in a trajectory store and record it, with a tier, beside the task.

    The record (difficulty.json) sits outside the task's digested bytes: a pass rate describes the
    policies that played the task, so measuring never makes a new task version.
    """
    from sparring.curriculum.difficulty import difficulty_record, measure, store_difficulty
    from sparring.store.base import TrajQuery
    from sparring.store.sqlite import SQLiteStore

    tasks = _paths_or_library(paths, library)
    st = SQLiteStore(from_store, readonly=True)
    try:
        ms = measure(tasks, lambda tid: st.iter_search(TrajQuery(task_id=tid, policy=policy, limit=None)))
    finally:
        st.close()
    by_digest = {t.digest: t for t in tasks}
    rows = []
    for m in ms:
        rec = difficulty_record(m, from_store, min_rollouts)
        if write and m.rollouts:
            store_difficulty(by_digest[m.digest], rec)
        rows.append(rec)
    measured = [r for r in rows if r["rollouts"]]
    if json_out:
        emit_json({"tasks": len(rows), "measured": len(measured), "results": rows})
    else:
        from rich.table import Table

        tb = Table("id", "version", "generator tier", "rollouts", "pass rate", "measured tier")
        for r in measured:
            tier = "-" if r["measured_tier"] is None else str(r["measured_tier"])
            tb.add_row(r["id"], str(r["version"]), str(r["generator_tier"]), str(r["rollouts"]),
                       f"{r['pass_rate']:.2f}", tier)  # fmt: skip
        out_console.print(tb)
        err_console.print(f"{len(measured)} of {len(rows)} tasks have judged rollouts in {from_store}")


@app.command("bench")
@guarded
def bench(
    n: int = typer.Option(12, "--n", min=1, help="Tasks to generate and check."),
    families: str = typer.Option(
        "data-analysis,function-impl,code-repair", "--families", help="Comma-separated."
    ),
    concurrency: int = typer.Option(3, "--concurrency", min=1, help="Tasks checked at once."),
    judge_concurrency: int = typer.Option(
        0, "--judge-concurrency", min=0, help="Judge runs in flight at once (0: two per CPU)."
    ),
    repeats: int = typer.Option(0, "--repeats", min=0, help="Reference runs (0: as `tasks check`)."),
    seed: int = typer.Option(0, "--seed"),
    backend: str = BACKEND_OPT,
    json_out: bool = JSON_OPT,
) -> None:
    """Benchmark admission throughput (tasks checked per minute) on a generated mixed sample."""
    from sparring.admission.bench import run_admission_bench

    fams = [f.strip() for f in families.split(",") if f.strip()]
    if not fams:
        raise ConfigError("--families names no family")
    with err_console.status(f"generating and checking {n} tasks"):
        res = run_async(
            run_admission_bench(
                make_cli_backend(backend),
                n,
                fams,
                concurrency,
                repeats or None,
                seed,
                judge_concurrency or None,
            )
        )
    if json_out:
        emit_json(res)
    else:
        out_console.print_json(data=res)


@app.command("regress")
@guarded
def regress_cmd(
    paths: list[Path] = PATHS_OR_LIBRARY_ARG,
    library: Path | None = LIBRARY_OPT,
    concurrency: int = typer.Option(2, "--concurrency", min=1),
    json_out: bool = JSON_OPT,
) -> None:
    """Re-run every admitted task's reference and initial state; report tasks whose outcome changed (drift)."""
    from sparring.admission.regress import regress

    tasks = _paths_or_library(paths, library)
    with err_console.status(f"re-running {len(tasks)} tasks"):
        drifts, skipped = run_async(regress(tasks, _judge(), concurrency=concurrency))
    changed = [d.to_json() for d in drifts if d.changes]
    if json_out:
        emit_json({"checked": len(drifts), "changed": changed, "unchanged": len(drifts) - len(changed),
                   "skipped": [t.id for t in skipped]})  # fmt: skip
    else:
        for c in changed:
            out_console.print(f"[red]changed[/] {c['id']}@{c['version']}")
            for line in c["changes"][:10]:
                out_console.print(f"    {line}")
        err_console.print(
            f"{len(drifts)} admitted tasks re-run: {len(changed)} changed; {len(skipped)} skipped (not admitted)"
        )
    if changed:
        raise typer.Exit(1)
