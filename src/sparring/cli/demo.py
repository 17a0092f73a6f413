"""`sparring demo`: the whole loop end to end on embedded defaults."""

from __future__ import annotations

from pathlib import Path

import typer

from sparring.cli.common import guarded

FULL = {"n_train": 16, "n_heldout": 6, "iterations": 4, "tasks_per_iteration": 4, "group_size": 4, "sft_steps": 60,
        "max_steps": 6, "heldout_max_steps": 6}
QUICK = {"n_train": 8, "n_heldout": 4, "iterations": 2, "tasks_per_iteration": 2, "group_size": 4, "sft_steps": 16,
         "max_steps": 4, "heldout_max_steps": 4}  # fmt: skip


def demo(
    quick: bool = typer.Option(False, "--quick", help="A smaller run (under 3 minutes on 2 cores)."),
    workdir: Path = typer.Option(Path(".sparring/demo"), "--workdir", help="Where tasks, model, store and metrics go."),
    seed: int = typer.Option(0, "--seed"),
    no_rl: bool = typer.Option(False, "--no-rl", help="Control run: the same loop without GRPO updates."),
    set_: list[str] = typer.Option([], "--set", help="Override a config field: --set group_size=8."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object on stdout; logs go to stderr."),
) -> None:
    """Generate code-repair tasks, build a tiny model, warm-start it, run GRPO iterations, compare held-out pass rates."""
    guarded(_demo)(quick, workdir, seed, no_rl, set_, json_out)


def _demo(quick: bool, workdir: Path, seed: int, no_rl: bool, overrides: list[str], json_out: bool) -> None:
    from sparring.cli.train import run_recipe
    from sparring.train.config import load_config

    base = dict(QUICK if quick else FULL)
    base.update(workdir=str(workdir), seed=seed, rl=not no_rl)
    cfg = load_config(None, overrides, base=base)
    run_recipe(cfg, json_out)
