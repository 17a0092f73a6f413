"""Asynchronous training: rollout throughput and trainer idle time for staleness k = 0, 1, 2.

    python benchmarks/async_train_bench.py [--ks 0,1,2] [--iterations 4] [--seed 0] [--executor local|ray]
                                           [--set sft_steps=80 ...]

The same recipe (``sparring demo --quick``: noisy-teacher warm start, then GRPO),
the same seed and the same budget (iterations x tasks x group) for each k. With
k = 0 the recipe samples, then updates; with k >= 1 it samples the next batch
while the trainer updates on the batch from k iterations ago (the queue drops
anything staler than k). Per k: ``rollouts_per_min`` over the RL iterations,
``trainer_idle_s`` (iteration time not spent updating), ``update_s``,
``idle_fraction``, the largest staleness trained on; ``vs_k0`` the ratios to
k = 0. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any


def _base() -> dict[str, Any]:
    """``sparring demo --quick``'s run (a tiny model that does learn: updates cost real time)."""
    import copy

    from sparring.cli.demo import QUICK

    return copy.deepcopy(QUICK)


def run_k(k: int, args: argparse.Namespace, root: Path) -> dict[str, Any]:
    from sparring.train.config import load_config
    from sparring.train.recipe import run_rl

    base = _base()
    base["grpo"] = {**base.get("grpo", {}), "staleness": k}
    cfg = load_config(None, args.set, base={**base, "workdir": str(root / f"k{k}"), "seed": args.seed,
                                             "iterations": args.iterations, "executor": args.executor,
                                             "monitor": {"exporters": []}})  # fmt: skip
    res = asyncio.run(run_rl(cfg))
    rows = res.iterations
    rollouts = sum(r["rollouts"] for r in rows)
    idle = sum(r["trainer_idle_s"] for r in rows)
    update = sum(r["update_s"] for r in rows)
    wall = idle + update
    return {
        "k": k, "iterations": len(rows), "rollouts": rollouts, "rl_wall_s": round(wall, 3),
        "rollouts_per_min": round(60 * rollouts / wall, 2) if wall else 0.0,
        "trainer_idle_s": round(idle, 3), "update_s": round(update, 3),
        "idle_fraction": round(idle / wall, 4) if wall else 0.0,
        "updates": sum(1 for r in rows if r["loss"] is not None),
        "staleness_max": max((r["staleness_max"] or 0 for r in rows), default=0),
        "reward_means": [r["reward_mean"] for r in rows],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", default="0,1,2")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--executor", default="local", choices=("local", "ray"))
    ap.add_argument(
        "--set", action="append", default=[], help="A config override, as `sparring train --set`."
    )
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="async-bench-"))
    runs = [run_k(int(k), args, root) for k in args.ks.split(",")]
    base = runs[0]
    for r in runs:
        r["vs_k0"] = {
            "throughput_ratio": round(r["rollouts_per_min"] / base["rollouts_per_min"], 3) if base["rollouts_per_min"] else None,
            "idle_ratio": round(r["trainer_idle_s"] / base["trainer_idle_s"], 3) if base["trainer_idle_s"] else None,
        }  # fmt: skip
    json.dump({"seed": args.seed, "executor": args.executor, "overrides": args.set, "runs": runs}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
