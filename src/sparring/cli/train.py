"""`sparring train` and the shared runner of the RL recipe (also used by `sparring demo`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from sparring.cli.common import emit_json, err_console, guarded, out_console, run_async


def print_iteration_table(rows: list[dict[str, Any]], heldout: dict[str, float] | None = None) -> None:
    from rich.table import Table

    t = Table(
        "iter",
        "reward mean",
        "pass rate",
        "statuses",
        "rollouts/min",
        "loss",
        "policy v",
        title="RL iterations",
    )
    for r in rows:
        st = " ".join(f"{k}:{v}" for k, v in sorted(r["statuses"].items()))
        loss = "-" if r.get("loss") is None else f"{r['loss']:.4f}"
        if r.get("grpo_skipped"):
            loss = "no signal"
        t.add_row(
            str(r["iteration"]), f"{r['reward_mean']:.3f}", f"{r['pass_rate']:.3f}", st,
            f"{r['throughput_per_min']:.1f}", loss, str(r["policy_version"]),
        )  # fmt: skip
    err_console.print(t)
    if heldout:
        h = Table("held-out", "pass rate", "reward mean", title="Held-out tasks")
        h.add_row(
            "before RL", f"{heldout.get('before_rl', 0):.3f}", f"{heldout.get('before_rl_reward', 0):.3f}"
        )
        h.add_row("after RL", f"{heldout.get('after_rl', 0):.3f}", f"{heldout.get('after_rl_reward', 0):.3f}")
        err_console.print(h)


def print_skill_table(skill: dict[str, dict[str, float | None]]) -> None:
    """The look-before-acting measure per held-out phase (families that teach it)."""
    from rich.table import Table

    f = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    t = Table(
        "held-out", "inspect first", "pass | inspected", "pass | not", "episodes", title="Look before acting"
    )
    for phase, label in (("before_rl", "before RL"), ("after_rl", "after RL")):
        if phase in skill:
            s = skill[phase]
            t.add_row(label, f(s["inspect_first"]), f(s["pass_if_inspect"]), f(s["pass_if_not"]),
                      f"{s['episodes'] or 0:.0f}")  # fmt: skip
    err_console.print(t)


def run_recipe(cfg: Any, json_out: bool, resume: bool = False) -> dict[str, Any]:
    from sparring.cli.progress import Bars
    from sparring.train.recipe import run_rl

    rows: list[dict[str, Any]] = []

    with Bars() as bars:

        def on_it(row: dict[str, Any]) -> None:
            rows.append(row)
            st = " ".join(f"{k}:{v}" for k, v in sorted(row["statuses"].items()))
            bars.log(
                f"iteration {row['iteration']}: reward {row['reward_mean']:.3f}, pass {row['pass_rate']:.3f}, "
                f"{row['rollouts']} rollouts in {row['seconds']:.1f}s, statuses {st}"
            )

        res = run_async(run_rl(cfg, log=bars.log, on_iteration=on_it, resume=resume, progress=bars))
    d = res.to_json()
    print_iteration_table(res.iterations, res.heldout)
    if res.skill:
        print_skill_table(res.skill)
    if res.trained_model:
        trained = f"trained model: {res.trained_model} (base: {res.model})"
    elif cfg.rl and cfg.iterations:
        trained = f"trained weights not saved (checkpoint_every: 0); base model: {res.model}"
    else:
        trained = f"no RL update ran (rl: false or iterations: 0); model: {res.model}"
    err_console.print(f"store: {res.store}   {trained}   {res.seconds:.1f}s", soft_wrap=True)
    if json_out:
        emit_json(d)
    return d


def train(
    config: Path = typer.Option(..., "--config", help="YAML or TOML RLConfig."),
    set_: list[str] = typer.Option([], "--set", help="Override a field: --set grpo.lr=1e-3 (repeatable)."),
    resume: bool = typer.Option(
        False, "--resume", help="Continue from the newest checkpoint in the workdir."
    ),
    json_out: bool = typer.Option(
        False, "--json", help="Print one JSON object on stdout; logs go to stderr."
    ),
    allow_unadmitted: bool = typer.Option(
        False, "--allow-unadmitted", help="Use tasks admission rejected (as --set allow_unadmitted=true)."
    ),
) -> None:
    """Run the RL recipe from a config file (the config is fully checked before any work starts). Only
    admitted tasks are used: tasks never checked are checked first (verdicts cached by digest)."""
    guarded(_train)(config, set_, resume, json_out, allow_unadmitted)


def _train(
    config: Path, overrides: list[str], resume: bool, json_out: bool, allow_unadmitted: bool = False
) -> None:
    from sparring.train.config import load_config

    cfg = load_config(config, [*overrides, *(["allow_unadmitted=true"] if allow_unadmitted else [])])
    run_recipe(cfg, json_out, resume)
    if not json_out:
        out_console.print("done")
