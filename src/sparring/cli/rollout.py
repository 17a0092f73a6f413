"""`sparring rollout`: group rollouts of a policy over a directory of tasks, into a store.

Every requested sample ends in the store exactly once with a typed status. A
run is identified by ``--run-id`` (printed in the JSON): running the same
command again with that id continues it, skipping what is stored, whether the
first process finished, was interrupted (SIGINT/SIGTERM: in-flight rollouts
finish for ``--drain-s``, then the run checkpoints and exits 130) or was killed.
"""

from __future__ import annotations

import asyncio
import signal
import uuid
from pathlib import Path
from typing import Any

import typer

from sparring.cli.common import (
    ALLOW_UNADMITTED_OPT,
    BACKEND_OPT,
    JSON_OPT,
    emit_json,
    err_console,
    guarded,
    make_cli_backend,
    out_console,
    run_async,
)
from sparring.cli.doctor import print_degraded_once
from sparring.cli.summary import print_summary
from sparring.errors import ConfigError


def rollout(
    tasks: Path = typer.Option(..., "--tasks", help="A task directory or a directory of tasks."),
    policy: str = typer.Option(..., "--policy", help="oracle | random | openai:URL#MODEL | hf:PATH"),
    group_size: int = typer.Option(1, "--group-size", help="Samples per task (one GRPO group)."),
    concurrency: int = typer.Option(4, "--concurrency", help="Rollouts (sandboxes) in flight at once."),
    store: Path = typer.Option(..., "--store", help="SQLite trajectory store (created if absent)."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Override the tasks' step budget."),
    seed: int = typer.Option(0, "--seed"),
    run_id: str | None = typer.Option(None, "--run-id", help="Continue this run (skips stored samples)."),
    spares: int = typer.Option(0, "--spares", help="Extra members per group; a group ends at G trainable."),
    max_retries: int = typer.Option(2, "--max-retries", help="Fresh-sandbox retries per infra fault."),
    replay_rounds: int = typer.Option(1, "--replay-rounds", help="Rounds replaying infra_error samples."),
    snapshot_every: int = typer.Option(
        0, "--snapshot-every", help="Snapshot every K steps; retries continue there."
    ),
    model_concurrency: int | None = typer.Option(
        None, "--model-concurrency", help="Policy requests in flight."
    ),
    judge_concurrency: int | None = typer.Option(None, "--judge-concurrency", help="Judge runs at once."),
    priority: str = typer.Option("train", "--priority", help="Priority class: eval, train or replay."),
    policy_timeout: float = typer.Option(60.0, "--policy-timeout", help="Seconds per policy HTTP request."),
    policy_turn_timeout: float | None = typer.Option(
        None,
        "--policy-turn-timeout",
        help="Seconds one policy turn may take (default 600); the task's wall clock bounds the commands only.",
    ),
    max_new_tokens: int | None = typer.Option(
        None, "--max-new-tokens", help="hf: tokens per turn (default 96)."
    ),
    temperature: float | None = typer.Option(
        None, "--temperature", help="hf: sampling temperature (default 1.0)."
    ),
    top_p: float | None = typer.Option(None, "--top-p", help="hf: nucleus sampling mass (default 1.0)."),
    max_prompt_tokens: int | None = typer.Option(
        None,
        "--max-prompt-tokens",
        help="hf: prompt budget; middle turns are dropped past it (default 1536).",
    ),
    drain_s: float = typer.Option(
        30.0, "--drain-s", help="On SIGINT/SIGTERM, seconds in-flight rollouts may finish."
    ),
    executor: str = typer.Option(
        "local", "--executor", help="Where rollouts run: local, or ray (one node actor per sandbox node)."
    ),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Ray cluster to use (default: start one on this machine)."
    ),
    branch_at: str | None = typer.Option(
        None,
        "--branch-at",
        help="Fork each episode after these turns: 1,2 | first:N | entropy:N (the N least sure) | all (see --branches).",
    ),
    branches: int = typer.Option(0, "--branches", help="Branches forked at each --branch-at turn (K)."),
    json_out: bool = JSON_OPT,
    backend: str = BACKEND_OPT,
    allow_unadmitted: bool = ALLOW_UNADMITTED_OPT,
) -> None:
    """Roll out POLICY on every task GROUP_SIZE times; every sample is stored, whatever happened to it.
    Only admitted tasks are used (`sparring tasks check`); --allow-unadmitted overrides.

    With --branch-at and --branches K, each episode's sandbox is snapshotted at those turns and K
    branches continue from each (stored with parent_id and branch_turn; docs/process-and-forks.md)."""
    from sparring.policy.spec import SamplingOptions

    guarded(_rollout)(
        tasks, policy, group_size, concurrency, store, max_steps, seed, run_id, json_out,
        dict(spares=spares, max_retries=max_retries, replay_rounds=replay_rounds, snapshot_every=snapshot_every,
             model_concurrency=model_concurrency, judge_concurrency=judge_concurrency, drain_s=drain_s),
        priority, policy_timeout, backend, executor, ray_address, allow_unadmitted,
        SamplingOptions(max_new_tokens, temperature, top_p, max_prompt_tokens), policy_turn_timeout, branch_at, branches,
    )  # fmt: skip


def _check_args(
    group_size: int, concurrency: int, max_steps: int | None, opts: dict[str, Any], timeout: float
) -> None:
    if group_size < 1 or concurrency < 1:
        raise ConfigError("--group-size and --concurrency must be at least 1")
    if max_steps is not None and max_steps < 1:
        raise ConfigError("--max-steps must be at least 1")
    for name in ("spares", "max_retries", "replay_rounds", "snapshot_every"):
        if opts[name] < 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 0")
    for name in ("model_concurrency", "judge_concurrency"):
        if opts[name] is not None and opts[name] < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
    if timeout <= 0 or opts["drain_s"] < 0:
        raise ConfigError("--policy-timeout must be > 0 and --drain-s >= 0")


def _rollout(
    tasks_dir: Path, policy_spec: str, group_size: int, concurrency: int, store_path: Path,
    max_steps: int | None, seed: int, run_id: str | None, json_out: bool, opts: dict[str, Any],
    priority: str, policy_timeout: float, backend_kind: str = "local", executor: str = "local",
    ray_address: str | None = None, allow_unadmitted: bool = False, sampling: Any = None,
    turn_s: float | None = None, branch_at: str | None = None, branches: int = 0,
) -> None:  # fmt: skip
    from sparring.admission.gate import refuse_unadmitted
    from sparring.distributed.executor import RayOptions, check_executor, make_executor
    from sparring.judge.pytest_judge import PytestJudge
    from sparring.policy.spec import SamplingOptions, make_policy
    from sparring.rollout.branching import check_branchable, parse_branch_plan
    from sparring.rollout.episode import StageLimits
    from sparring.rollout.progress import RolloutProgress
    from sparring.rollout.run_records import check_resume
    from sparring.rollout.scheduler import RolloutScheduler
    from sparring.rollout.slots import priority_rank
    from sparring.sandbox.config import backend_config
    from sparring.sandbox.pool import SandboxPool
    from sparring.store.sqlite import SQLiteStore
    from sparring.tasks.loader import find_tasks

    _check_args(group_size, concurrency, max_steps, opts, policy_timeout)
    priority_rank(priority)
    check_executor(executor)
    if ray_address and executor != "ray":
        raise ConfigError("--ray-address needs --executor ray")
    if store_path.exists():  # a file that is not a store is refused (untouched) before any work
        SQLiteStore(store_path, readonly=True).close()
    plan = parse_branch_plan(branch_at, branches)
    if plan is not None and executor != "local":
        raise ConfigError("--branch-at forks sandboxes in this process: use --executor local")
    task_list = find_tasks(tasks_dir)
    if not task_list:
        raise ConfigError(f"no tasks under {tasks_dir}")
    if plan is not None:
        check_branchable(task_list)
    if not allow_unadmitted:
        refuse_unadmitted(task_list)  # one line, before a policy, store or sandbox is touched
    if turn_s is not None and turn_s <= 0:
        raise ConfigError("--policy-turn-timeout must be > 0 seconds")
    sampling = sampling or SamplingOptions()
    kwargs = {"timeout_s": policy_timeout} if policy_spec.strip().startswith("openai:") else {}
    pol = make_policy(policy_spec, **kwargs, **sampling.for_spec(policy_spec))
    check = getattr(pol, "check", None)
    if check is not None:  # unreachable server / unknown model: one line, before a store is touched
        run_async(check())
    st = SQLiteStore(store_path)  # created only once the tasks and the policy spec are known good
    try:
        run_id = run_id or uuid.uuid4().hex[:12]
        previous = st.get_run(run_id)
        config = {"tasks": str(tasks_dir), "policy": policy_spec, "group_size": group_size, "seed": seed,
                  "max_steps": max_steps, **opts, **sampling.record(turn_s),
                  **(plan.to_json() if plan is not None else {})}  # fmt: skip
        check_resume(run_id, previous, config)
        if backend_kind == "local":
            print_degraded_once()  # what isolation this run gets, said once at its start
        backend = make_cli_backend(backend_kind)  # each task's spec names its layer: agent and judge run it

        async def go():
            st.start_run(run_id, config)
            pool = SandboxPool(backend, max_idle=concurrency)
            sched = RolloutScheduler(pool, PytestJudge(backend), st, concurrency=concurrency, max_steps=max_steps,
                                     limits=StageLimits(policy_turn_s=turn_s), branch=plan, **opts)  # fmt: skip
            ray_opts = RayOptions(
                address=ray_address, capacity=concurrency, backend=backend_config(backend_kind)
            )
            runner = make_executor(executor, sched, ray_opts)  # starts or joins the cluster (seconds)
            loop = asyncio.get_running_loop()
            signals = 0

            def on_signal() -> None:
                nonlocal signals
                signals += 1
                if signals == 1:
                    err_console.print(f"stopping: in-flight rollouts finish within {opts['drain_s']:g}s "
                                      "(signal again to stop now)")  # fmt: skip
                    runner.request_stop()
                else:
                    sched._cancel_running()

            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, on_signal)
            try:
                with RolloutProgress(lambda: sched.stats, err_console, transient=json_out):
                    return await runner.rollout(task_list, pol, group_size, run_id=run_id, seed=seed,
                                                priority=priority, resume=True, keep_trajectories=False)  # fmt: skip
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
                await runner.aclose()
                await pool.close()
                await pol.close()

        summary = run_async(go())
    finally:
        st.close()
    d = summary.to_json()
    if json_out:
        emit_json(d)
    else:
        print_summary(out_console, d, "rollout")
    if summary.interrupted:
        err_console.print(
            f"interrupted: {summary.pending} sample(s) pending; continue with --run-id {summary.run_id}",
            highlight=False,
        )
        raise typer.Exit(130)
