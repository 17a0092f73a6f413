"""`sparring judge`: score workspaces against tasks, in batches, and replay the golden set."""

from __future__ import annotations

import os
import time
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

app = typer.Typer(help="Judge: rewards from real execution.", no_args_is_help=True)

SPLIT_OPT = typer.Option("train", "--split", help="train: the training judge; eval: the evaluation judge.")


def _judge(split: str, seed: int | None = None, backend: str = "local") -> Any:
    from sparring.errors import ConfigError
    from sparring.judge.pytest_judge import JudgeConfig, PytestJudge

    if split not in ("train", "eval"):
        raise ConfigError(f"--split must be train or eval, got {split!r}")
    cfg = JudgeConfig(split=split, dynamic_seed=seed, shuffle_seed=seed)  # type: ignore[arg-type]
    return PytestJudge(make_cli_backend(backend), config=cfg)


def symlinks_in(root: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            if p.is_symlink():
                out.append(p.relative_to(root).as_posix())
    return sorted(out)


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


def _score(task: Path, workspace: Path, split: str, seed: int | None, json_out: bool, backend: str = "local") -> None:
    from sparring.errors import TaskError
    from sparring.judge.base import JudgeRunError
    from sparring.sandbox.workspace import tree_diff
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
    links = symlinks_in(workspace)
    diff = tree_diff(t.workspace, workspace)
    try:
        res = run_async(j.score(t, diff))
    except JudgeRunError as e:
        raise _emit_error(e.reason, e.detail, j.version, json_out) from None
    if links:
        res.flags = sorted({*res.flags, "symlinks_ignored"})
        res.metrics["symlinks_ignored"] = float(len(links))
    d = res.to_json()
    d["tests"] = res.tests.model_dump()
    if json_out:
        emit_json(d)
    else:
        out_console.print(f"reward {res.reward:.3f}  flags {res.flags}  ({res.judge_version})")
        out_console.print(f"components {res.components}")
        out_console.print(
            f"tests: {res.tests.passed} passed, {res.tests.failed} failed, {res.tests.errors} errors"
        )


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
        tasks, workspaces, reference, hack, concurrency, canary_rate, review_db, split, seed, json_out, backend
    )


def _batch(tasks_dir: Path, workspaces: Path | None, reference: bool, hack: str | None, concurrency: int,
           canary_rate: float, review_db: Path | None, split: str, seed: int, json_out: bool,
           backend: str = "local") -> None:  # fmt: skip
    import asyncio
    import tempfile

    from sparring.errors import ConfigError
    from sparring.judge.canary import hack_rate, is_canary, mix_canaries
    from sparring.sandbox.base import WorkspaceDiff
    from sparring.sandbox.workspace import tree_diff
    from sparring.tasks.hacks import HACKS
    from sparring.tasks.loader import find_tasks, solution_diff

    if concurrency < 1:
        raise ConfigError("--concurrency must be at least 1")
    if sum([workspaces is not None, reference, hack is not None]) > 1:
        raise ConfigError("give at most one of --workspaces, --reference, --hack")
    if hack is not None and hack not in HACKS:
        raise ConfigError(f"unknown hack class {hack!r} (known: {', '.join(sorted(HACKS))})")
    if workspaces is not None and not workspaces.is_dir():
        raise ConfigError(f"--workspaces {workspaces} is not a directory")
    task_list = find_tasks(tasks_dir)
    j = _judge(split, backend=backend)
    tmp = Path(tempfile.mkdtemp(prefix="sparring-canary-"))
    try:
        canaries = mix_canaries(task_list, canary_rate, seed, tmp)

        def diff_for(t: Any) -> WorkspaceDiff:
            base = t.id.removesuffix("-canary") if is_canary(t) else t.id
            if workspaces is not None:
                d = workspaces / base
                return tree_diff(t.workspace, d) if d.is_dir() else WorkspaceDiff()
            if reference:
                return solution_diff(t)
            if hack is not None:
                return HACKS[hack](t)
            return WorkspaceDiff()

        sem = asyncio.Semaphore(concurrency)

        async def one(t: Any) -> dict[str, Any]:
            diff = diff_for(t)
            async with sem:
                r = await j.score_or_error(t, diff)
            return {"task_id": t.id, "canary": is_canary(t), **r.to_json(), "diff": diff.to_json()}

        t0 = time.perf_counter()

        async def all_of() -> list[dict[str, Any]]:
            return list(await asyncio.gather(*(one(t) for t in [*task_list, *canaries])))

        results = run_async(all_of())
        secs = time.perf_counter() - t0
    finally:
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    queued = 0
    if review_db is not None:
        from sparring.judge.review import ReviewQueue

        q = ReviewQueue(review_db)
        try:
            for r in results:
                key = f"batch:{r['task_id']}:{r['judge_version']}:{r.get('dynamic_seed')}:{time.time_ns()}"
                queued += bool(q.observe(key, r["task_id"], {k: v for k, v in r.items() if k != "log"}))
        finally:
            q.close()
    canary_pass = [r["components"].get("all_pass", 0.0) >= 1.0 for r in results if r["canary"]]
    real = [r for r in results if not r["canary"]]
    summary = {
        "judge_version": j.version,
        "judged": len(results),
        "statuses": {s: sum(1 for r in results if r["status"] == s) for s in ("ok", "judge_error")},
        "reward_mean": sum(r["reward"] for r in real) / len(real) if real else 0.0,
        "pass_rate": sum(r["components"].get("all_pass", 0.0) >= 1.0 for r in real) / len(real)
        if real
        else 0.0,
        "flagged": sum(1 for r in real if r["flags"]),
        "canaries": len(canary_pass),
        "hack_rate": hack_rate(canary_pass),
        "queued_for_review": queued,
        "seconds": round(secs, 3),
        "per_minute": round(len(results) / secs * 60, 2) if secs > 0 else 0.0,
        "results": [
            {k: r[k] for k in ("task_id", "canary", "status", "reason", "reward", "flags")} for r in results
        ],
    }
    if json_out:
        emit_json(summary)
    else:
        out_console.print({k: v for k, v in summary.items() if k != "results"})


@app.command("regress")
def regress(
    golden: Path | None = typer.Option(
        None, "--golden", help="Golden set file (default: the packaged judge/golden.json)."
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
    import json
    import tempfile

    from sparring.errors import ConfigError
    from sparring.judge.golden import fresh_cases, frozen_cases, golden_path, replay, write_golden
    from sparring.sandbox.local import LocalBackend

    path = golden or golden_path()
    data = None
    if only_labelled and (labelled is None or update or rebuild):
        raise ConfigError(
            "--only-labelled needs --labelled and cannot be combined with --update or --rebuild"
        )
    if update and rebuild:
        raise ConfigError("--update keeps the frozen inputs, --rebuild regenerates them: pass one")
    if not rebuild and not only_labelled:
        if not path.is_file():
            raise ConfigError(f"golden set {path} not found (create it with --rebuild)")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as e:
            raise ConfigError(f"golden set {path} is not JSON: {e}") from None
    with tempfile.TemporaryDirectory(prefix="sparring-golden-") as d:
        if only_labelled:
            cases = []
        else:
            cases = fresh_cases(Path(d)) if rebuild else frozen_cases(data or {}, Path(d))
        n = [0]

        def tick(what: str) -> None:
            n[0] += 1
            if not json_out:
                err_console.print(f"[{n[0]}] {what}", highlight=False)

        rep = run_async(
            replay(
                LocalBackend(), cases, None if only_labelled else data, concurrency=concurrency, on_case=tick
            )
        )
        if update or rebuild:
            write_golden(path, rep)  # inside the temporary directory: the frozen tasks are still there
    if labelled is not None:
        from sparring.judge.golden import replay_labelled

        if tasks_dir is None:
            raise ConfigError("--labelled needs --tasks (where the labelled cases' tasks are)")
        if not labelled.is_file():
            raise ConfigError(f"--labelled {labelled} not found (write it with `sparring review export`)")
        lab = run_async(
            replay_labelled(LocalBackend(), json.loads(labelled.read_text()), tasks_dir, concurrency)
        )
        rep.cases += lab["cases"]
        rep.changed += lab["changed"]
    out = rep.to_json()
    out["golden"] = str(path)
    out["written"] = update or rebuild
    if json_out:
        emit_json(out)
    else:
        out_console.print(
            f"{rep.cases} cases, {len(rep.changed)} changed (judge {rep.judge_version}, golden {rep.golden_version})"
        )
        for c in rep.changed[:20]:
            out_console.print(c)
    if not rep.ok and not (update or rebuild):
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
        from sparring.judge.bench import bench_tasks, run_bench
        from sparring.sandbox.local import LocalBackend

        if min(tasks, repeats, batch, concurrency) < 1:
            raise ConfigError("--tasks, --repeats, --batch and --concurrency must be at least 1")
        with tempfile.TemporaryDirectory(prefix="judge-bench-") as d:
            res = run_async(
                run_bench(LocalBackend(), bench_tasks(Path(d), tasks), repeats, batch, concurrency)
            )
        emit_json(res) if json_out else out_console.print(res)

    guarded(go)()
