"""`sparring rollout`: group rollouts of a policy over a directory of tasks, into a store."""

from __future__ import annotations

from pathlib import Path

import typer

from sparring.cli.common import JSON_OPT, emit_json, err_console, guarded, out_console, run_async
from sparring.errors import ConfigError


def rollout(
    tasks: Path = typer.Option(..., "--tasks", help="A task directory or a directory of tasks."),
    policy: str = typer.Option(..., "--policy", help="oracle | random | openai:URL#MODEL | hf:PATH"),
    group_size: int = typer.Option(1, "--group-size", help="Samples per task (one GRPO group)."),
    concurrency: int = typer.Option(4, "--concurrency", help="Rollouts in flight at once."),
    store: Path = typer.Option(..., "--store", help="SQLite trajectory store (created if absent)."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Override the tasks' step budget."),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = JSON_OPT,
) -> None:
    """Roll out POLICY on every task GROUP_SIZE times; every sample is stored, whatever happened to it."""
    guarded(_rollout)(tasks, policy, group_size, concurrency, store, max_steps, seed, json_out)


def _rollout(
    tasks_dir: Path, policy_spec: str, group_size: int, concurrency: int, store_path: Path,
    max_steps: int | None, seed: int, json_out: bool,
) -> None:  # fmt: skip
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from sparring.judge.pytest_judge import PytestJudge
    from sparring.policy.spec import make_policy
    from sparring.rollout.scheduler import RolloutScheduler
    from sparring.sandbox.local import LocalBackend
    from sparring.sandbox.pool import SandboxPool
    from sparring.store.sqlite import SQLiteStore
    from sparring.tasks.loader import find_tasks

    if group_size < 1 or concurrency < 1:
        raise ConfigError("--group-size and --concurrency must be at least 1")
    if max_steps is not None and max_steps < 1:
        raise ConfigError("--max-steps must be at least 1")
    task_list = find_tasks(tasks_dir)
    pol = make_policy(policy_spec)
    backend = LocalBackend()
    st = SQLiteStore(store_path)
    counts = {"ok": 0, "failed": 0}

    async def go():  # type: ignore[no-untyped-def]
        pool = SandboxPool(backend, max_idle=concurrency)
        with Progress(
            TextColumn("rollouts"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[info]}"),
            TimeElapsedColumn(), console=err_console, transient=json_out,
        ) as prog:  # fmt: skip
            bar = prog.add_task("rollouts", total=len(task_list) * group_size, info="")

            def done(t):  # type: ignore[no-untyped-def]
                counts["ok" if t.status == "ok" else "failed"] += 1
                prog.update(bar, advance=1, info=f"ok {counts['ok']} other {counts['failed']}")

            sched = RolloutScheduler(pool, PytestJudge(backend), st, concurrency=concurrency, max_steps=max_steps, on_done=done)
            try:
                return await sched.run(task_list, pol, group_size, seed=seed)
            finally:
                await pool.close()
                await pol.close()

    try:
        summary = run_async(go())
    finally:
        st.close()
    d = summary.to_json()
    if json_out:
        emit_json(d)
    else:
        out_console.print(d)
