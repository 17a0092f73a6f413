"""`sparring judge`: score workspaces against tasks, in batches, and replay the golden set."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from sparring.cli.common import (
    BACKEND_OPT,
    JSON_OPT,
    emit_json,
    err_console,
    fail,
    guarded,
    make_cli_backend,
    out_console,
    run_async,
)
from sparring.cli.summary import one_line, print_summary

app = typer.Typer(help="Judge: rewards from real execution.", no_args_is_help=True)

SPLIT_OPT = typer.Option("train", "--split", help="train: the training judge; eval: the evaluation judge.")


def _judge(split: str, seed: int | None = None, backend: str = "local") -> Any:
    from sparring.errors import ConfigError
    from sparring.judge.pytest_judge import JudgeConfig, PytestJudge

    if split not in ("train", "eval"):
        raise ConfigError(f"--split must be train or eval, got {split!r}")
    cfg = JudgeConfig(split=split, dynamic_seed=seed, shuffle_seed=seed)
    return PytestJudge(make_cli_backend(backend), config=cfg)


def _emit_error(reason: str, detail: str, version: str, json_out: bool) -> typer.Exit:
    if json_out:
        emit_json({"status": "judge_error", "reason": reason, "error": detail, "reward": None, "components": {},
                   "flags": [], "judge_version": version, "tests": {"passed": 0, "failed": 0, "errors": 0}})  # fmt: skip
    return fail(f"judge_error ({reason}): {detail}")


@app.command("score")
def score(
    task: Path = typer.Option(..., "--task", help="Task directory."),
    workspace: Path = typer.Option(
        ..., "--workspace", help="The final workspace to score (diffed against the task's initial state)."
    ),
    split: str = SPLIT_OPT,
    seed: int | None = typer.Option(
        None, "--seed", help="Pin the generated-test and test-order seeds (default: fresh)."
    ),
    json_out: bool = JSON_OPT,
    backend: str = BACKEND_OPT,
) -> None:
    """Apply WORKSPACE's diff to a pristine copy of the task, add the hidden tests, run them, print the reward.

    A judge failure (unknown task, missing workspace, judge timeout, a test runner that crashed) is a typed
    result: status judge_error with a reason, exit code 2; never a silent zero.
    """
    guarded(_score)(task, workspace, split, seed, json_out, backend)


def _score(
    task: Path, workspace: Path, split: str, seed: int | None, json_out: bool, backend: str = "local"
) -> None:
    from sparring.errors import TaskError
    from sparring.judge.base import JudgeRunError
    from sparring.judge.directory import score_directory
    from sparring.tasks.loader import load_task

    j = _judge(split, seed, backend)
    try:
        t = load_task(task)
    except TaskError as e:
        raise _emit_error("task_unknown", str(e), j.version, json_out) from None
    if not workspace.is_dir():
        raise _emit_error(
            "workspace_missing", f"--workspace {workspace} is not a directory", j.version, json_out
        )
    try:
        res = run_async(score_directory(j, t, workspace))
    except JudgeRunError as e:
        raise _emit_error(e.reason, e.detail, j.version, json_out) from None
    d = res.to_json()
    d["tests"] = res.tests.model_dump()
    if json_out:
        emit_json(d)
    else:
        tests = f"{res.tests.passed} passed, {res.tests.failed} failed, {res.tests.errors} errors"
        shown = {"reward": res.reward, "flags": list(res.flags) or "none", "tests": tests,
                 "judge_version": res.judge_version, "components": dict(res.components)}  # fmt: skip
        print_summary(out_console, shown, "judge score")


@app.command("batch")
def batch(
    tasks: Path = typer.Option(..., "--tasks", help="A task directory or a directory of tasks."),
    workspaces: Path | None = typer.Option(
        None, "--workspaces", help="DIR/<task id>/ is each task's final workspace."
    ),
    reference: bool = typer.Option(False, "--reference", help="Score each task's reference solution."),
    hack: str | None = typer.Option(None, "--hack", help="Score a red-team hack class on every task."),
    concurrency: int = typer.Option(2, "--concurrency", help="Workspaces judged at once."),
    canary_rate: float = typer.Option(
        0.0, "--canary-rate", help="Share of tasks also judged as an impossible canary."
    ),
    review_db: Path | None = typer.Option(
        None, "--review-db", help="Queue high-risk results in this review queue."
    ),
    split: str = SPLIT_OPT,
    seed: int = typer.Option(0, "--seed", help="Seed of the canary choice."),
    json_out: bool = JSON_OPT,
    backend: str = BACKEND_OPT,
) -> None:
    """Judge many workspaces in parallel (initial states unless --workspaces/--reference/--hack)."""
    guarded(_batch)(
        tasks,
        workspaces,
        reference,
        hack,
        concurrency,
        canary_rate,
        review_db,
        split,
        seed,
        json_out,
        backend,
    )


def _batch(tasks_dir: Path, workspaces: Path | None, reference: bool, hack: str | None, concurrency: int,
           canary_rate: float, review_db: Path | None, split: str, seed: int, json_out: bool,
           backend: str = "local") -> None:  # fmt: skip
    from sparring.judge.runner.batch import BatchSource, run_batch
    from sparring.tasks.loader import find_tasks

    source = BatchSource(workspaces, reference, hack)
    source.check(concurrency)
    task_list = find_tasks(tasks_dir)
    j = _judge(split, backend=backend)
    from sparring.cli.progress import Bars

    bars = Bars()

    def judged(done: int, total: int) -> None:
        if done == 1:
            bars.start("judge", total, "judging workspaces")
        bars.advance("judge")

    with bars:
        summary = run_batch(
            j, task_list, source, concurrency=concurrency, canary_rate=canary_rate, seed=seed,
            review_db=review_db, progress=judged,
        )  # fmt: skip
        bars.finish("judge")
    if json_out:
        emit_json(summary)
    else:
        print_summary(out_console, {k: v for k, v in summary.items() if k != "results"}, "judge batch")


@app.command("regress")
def regress(
    golden: Path | None = typer.Option(
        None, "--golden", help="Golden set file (default: the packaged judge/quality/golden.json)."
    ),
    update: bool = typer.Option(
        False,
        "--update",
        help="Re-record the verdicts with this judge, on the same frozen tasks and workspaces.",
    ),
    rebuild: bool = typer.Option(
        False,
        "--rebuild",
        help="Regenerate the frozen tasks and workspaces from the generators and red-team "
        "catalogue, then record (the only way the golden inputs change).",
    ),
    concurrency: int = typer.Option(2, "--concurrency"),
    labelled: Path | None = typer.Option(
        None, "--labelled", help="Also replay review-labelled cases (`sparring review export`)."
    ),
    tasks: Path | None = typer.Option(
        None, "--tasks", help="Where the labelled cases' tasks are (with --labelled)."
    ),
    only_labelled: bool = typer.Option(False, "--only-labelled", help="Replay only the --labelled cases."),
    json_out: bool = JSON_OPT,
) -> None:
    """Replay the golden set (frozen task, frozen workspace -> expected verdict); exit 1 if any verdict changed.

    The tasks and workspaces are stored in the golden file itself, so generator changes never move it.
    With --labelled, cases a person labelled in the review queue are replayed too: a workspace labelled
    `hack` must score 0, one labelled `ok` must keep its reward.
    """
    guarded(_regress)(golden, update, rebuild, concurrency, labelled, tasks, only_labelled, json_out)


def _regress(golden: Path | None, update: bool, rebuild: bool, concurrency: int, labelled: Path | None,
             tasks_dir: Path | None, only_labelled: bool, json_out: bool) -> None:  # fmt: skip
    from sparring.judge.quality.regress import RegressOptions, run_regress
    from sparring.sandbox.local.backend import LocalBackend

    opts = RegressOptions(golden, update, rebuild, labelled, tasks_dir, only_labelled, concurrency)
    n = [0]

    def tick(what: str) -> None:
        n[0] += 1
        if not json_out:
            err_console.print(f"[{n[0]}] {what}", highlight=False)

    rep, out = run_regress(LocalBackend(), opts, on_case=tick)
    if json_out:
        emit_json(out)
    else:
        out_console.print(
            f"{rep.cases} cases, {len(rep.changed)} changed (judge {rep.judge_version}, golden {rep.golden_version})"
        )
        for c in rep.changed[:20]:
            out_console.print(one_line(c), markup=False, highlight=False)
    if not rep.ok and not opts.writes:
        raise fail(f"{len(rep.changed)} of {rep.cases} golden verdicts changed", code=1)


@app.command("bench")
def bench(
    tasks: int = typer.Option(4, "--tasks", help="Generated tasks (half code-repair, half function-impl)."),
    repeats: int = typer.Option(3, "--repeats"),
    batch: int = typer.Option(12, "--batch", help="Workspaces in the throughput batch."),
    concurrency: int = typer.Option(2, "--concurrency"),
    json_out: bool = JSON_OPT,
) -> None:
    """Judge overhead vs the same hidden tests run bare, and workspaces judged per minute."""

    def go() -> None:
        import tempfile

        from sparring.errors import ConfigError
        from sparring.judge.quality.bench import bench_tasks, run_bench
        from sparring.sandbox.local.backend import LocalBackend

        if min(tasks, repeats, batch, concurrency) < 1:
            raise ConfigError("--tasks, --repeats, --batch and --concurrency must be at least 1")
        with tempfile.TemporaryDirectory(prefix="judge-bench-") as d:
            res = run_async(
                run_bench(LocalBackend(), bench_tasks(Path(d), tasks), repeats, batch, concurrency)
            )
        emit_json(res) if json_out else print_summary(out_console, res, "judge bench")

    guarded(go)()
