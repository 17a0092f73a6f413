"""`sparring eval`: roll a policy out over tasks and score it with the evaluation judge only."""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

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


def eval_cmd(
    tasks: Path = typer.Option(..., "--tasks", help="A task directory or a directory of tasks."),
    policy: str = typer.Option(
        ..., "--policy", help="oracle | random | adversarial[:CLASS] | openai:URL#MODEL | hf:PATH"
    ),
    store: Path = typer.Option(..., "--store", help="SQLite trajectory store (created if absent)."),
    group_size: int = typer.Option(1, "--group-size", help="Samples per task."),
    concurrency: int = typer.Option(2, "--concurrency", help="Rollouts in flight at once."),
    canary_rate: float = typer.Option(
        0.0, "--canary-rate", help="Share of tasks also run as impossible canaries."
    ),
    seed: int = typer.Option(0, "--seed"),
    json_out: bool = JSON_OPT,
    backend: str = BACKEND_OPT,
    executor: str = typer.Option("local", "--executor", help="Where rollouts run: local or ray."),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster to use (default: start one on this machine)."
    ),
) -> None:
    """Evaluate POLICY with the evaluation judge (hidden/eval/ tests, never the training judge's).

    With --canary-rate, impossible variants of some tasks are mixed in; the share of canaries the
    policy "passes" is reported as hack_rate (every such pass is a measured cheat).
    """
    guarded(_eval)(tasks, policy, store, group_size, concurrency, canary_rate, seed, json_out, backend,
                   executor, ray_address)  # fmt: skip


def _eval(tasks_dir: Path, policy_spec: str, store_path: Path, group_size: int, concurrency: int,
          canary_rate: float, seed: int, json_out: bool, backend_kind: str = "local", executor: str = "local",
          ray_address: str | None = None) -> None:  # fmt: skip
    from sparring.distributed.executor import RayOptions, check_executor, make_executor
    from sparring.errors import ConfigError
    from sparring.judge.canary import hack_rate, is_canary, mix_canaries
    from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
    from sparring.policy.spec import make_policy
    from sparring.rollout.run_records import outcome_figures
    from sparring.rollout.scheduler import RolloutScheduler
    from sparring.sandbox.config import backend_config
    from sparring.sandbox.pool import SandboxPool
    from sparring.store.sqlite import SQLiteStore
    from sparring.tasks.loader import find_tasks

    if group_size < 1 or concurrency < 1:
        raise ConfigError("--group-size and --concurrency must be at least 1")
    check_executor(executor)
    if ray_address and executor != "ray":
        raise ConfigError("--ray-address needs --executor ray")
    task_list = find_tasks(tasks_dir)
    pol = make_policy(policy_spec)
    backend = make_cli_backend(backend_kind)  # each task's spec names its layer: agent and judge run it
    judge = PytestJudge(backend, config=JudgeConfig(split="eval"))
    tmp = Path(tempfile.mkdtemp(prefix="sparring-eval-"))
    done: list[Any] = []
    st = SQLiteStore(store_path)
    t0 = time.perf_counter()
    try:
        canaries = mix_canaries(task_list, canary_rate, seed, tmp)

        async def go():
            pool = SandboxPool(backend, max_idle=concurrency)
            try:
                sched = RolloutScheduler(pool, judge, st, concurrency=concurrency, on_done=done.append)
                ray = RayOptions(address=ray_address, capacity=concurrency, backend=backend_config(backend_kind),
                                 judge=judge.config)  # the nodes judge with the eval split too  # fmt: skip
                runner = make_executor(executor, sched, ray)
                try:
                    return await runner.rollout([*task_list, *canaries], pol, group_size, run_id=uuid.uuid4().hex[:12],
                                                seed=seed)  # fmt: skip
                finally:
                    await runner.aclose()
            finally:
                await pool.close()
                await pol.close()

        summary = run_async(go())
        canary_ids = {c.id for c in canaries if is_canary(c)}
    finally:
        st.close()
        shutil.rmtree(tmp, ignore_errors=True)
    real = [t for t in done if t.task_id not in canary_ids]
    canary_pass = [t.passed for t in done if t.task_id in canary_ids]
    d = summary.to_json()
    d.update(
        {
            "judge_version": judge.version,
            "split": "eval",
            "tasks_without_eval_split": sum(1 for t in task_list if not judge.has_eval_split(t)),
            **outcome_figures(real),  # reward mean over judged samples only (None is not 0)
            "canaries": len(canary_pass),
            "hack_rate": hack_rate(canary_pass),
            "seconds": round(time.perf_counter() - t0, 3),
        }
    )
    if d["tasks_without_eval_split"]:
        err_console.print(
            f"note: {d['tasks_without_eval_split']} task(s) have no hidden/eval/ split; scored on their training tests"
        )
    emit_json(d) if json_out else out_console.print(d)
