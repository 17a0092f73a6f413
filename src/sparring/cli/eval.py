"""`sparring eval`: roll a policy out over tasks and score it with the evaluation judge only."""

from __future__ import annotations

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
from sparring.cli.summary import print_summary


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
    allow_unadmitted: bool = ALLOW_UNADMITTED_OPT,
    policy_turn_timeout: float | None = typer.Option(
        None, "--policy-turn-timeout", help="Seconds one policy turn may take (default 600)."
    ),
    max_new_tokens: int | None = typer.Option(None, "--max-new-tokens", help="hf: tokens per turn."),
    temperature: float | None = typer.Option(None, "--temperature", help="hf: sampling temperature."),
    top_p: float | None = typer.Option(None, "--top-p", help="hf: nucleus sampling mass."),
    max_prompt_tokens: int | None = typer.Option(
        None, "--max-prompt-tokens", help="hf: prompt budget; middle turns are dropped past it."
    ),
) -> None:
    """Evaluate POLICY with the evaluation judge (hidden/eval/ tests, never the training judge's).

    With --canary-rate, impossible variants of some tasks are mixed in; the share of canaries the
    policy "passes" is reported as hack_rate (every such pass is a measured cheat).
    """
    from sparring.policy.spec import SamplingOptions

    guarded(_eval)(tasks, policy, store, group_size, concurrency, canary_rate, seed, json_out, backend,
                   executor, ray_address, allow_unadmitted,
                   SamplingOptions(max_new_tokens, temperature, top_p, max_prompt_tokens), policy_turn_timeout)  # fmt: skip


def _eval(tasks_dir: Path, policy_spec: str, store_path: Path, group_size: int, concurrency: int,
          canary_rate: float, seed: int, json_out: bool, backend_kind: str = "local", executor: str = "local",
          ray_address: str | None = None, allow_unadmitted: bool = False, sampling: Any = None,
          turn_s: float | None = None) -> None:  # fmt: skip
    from sparring.admission.gate import refuse_unadmitted
    from sparring.distributed.executor import RayOptions, check_executor, make_executor
    from sparring.errors import ConfigError
    from sparring.policy.spec import SamplingOptions, make_policy
    from sparring.rollout.evaluate import check_eval_options, evaluate
    from sparring.sandbox.config import backend_config
    from sparring.store.sqlite import SQLiteStore
    from sparring.tasks.loader import find_tasks

    check_eval_options(group_size, concurrency)
    check_executor(executor)
    if ray_address and executor != "ray":
        raise ConfigError("--ray-address needs --executor ray")
    task_list = find_tasks(tasks_dir)
    if not allow_unadmitted:
        refuse_unadmitted(task_list)
    if turn_s is not None and turn_s <= 0:
        raise ConfigError("--policy-turn-timeout must be > 0 seconds")
    pol = make_policy(policy_spec, **(sampling or SamplingOptions()).for_spec(policy_spec))
    backend = make_cli_backend(backend_kind)  # each task's spec names its layer: agent and judge run it
    st = SQLiteStore(store_path)
    try:

        def runner(sched):
            ray = RayOptions(address=ray_address, capacity=concurrency, backend=backend_config(backend_kind),
                             judge=sched.judge.config)  # the nodes judge with the eval split too  # fmt: skip
            return make_executor(executor, sched, ray)

        d = run_async(
            evaluate(task_list, pol, backend, st, group_size=group_size, concurrency=concurrency,
                     canary_rate=canary_rate, seed=seed, make_runner=runner, policy_turn_s=turn_s)
        )  # fmt: skip
    finally:
        st.close()
    if d["tasks_without_eval_split"]:
        err_console.print(
            f"note: {d['tasks_without_eval_split']} task(s) have no hidden/eval/ split; scored on their training tests"
        )
    emit_json(d) if json_out else print_summary(out_console, d, "eval")
