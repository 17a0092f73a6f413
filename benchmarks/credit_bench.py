"""Tree credit against flat GRPO (issue 37): the sampled tool calls each needs to reach flat GRPO's final
held-out pass rate, per seed, from the same warm-started weights; prints one JSON object.

    python benchmarks/credit_bench.py [--family shell-look] [--seeds 0,1,2] [--workdir .sparring/credit]
                                      [--flat-iterations 12] [--tree-iterations 10] [--branch-at 1] [--branches 2]
                                      [--tree-group-size 4] [--eval-every 2] [--reuse] [--set KEY=VALUE ...]

Per seed, two ``sparring demo`` runs of the family's demo configuration, each in its own workdir:

1. **flat**: the demo as it is (its warm start, then GRPO), with a held-out evaluation every
   ``--eval-every`` iterations (``eval_every``: the result's ``heldout_curve`` pairs each pass rate
   with the tool calls sampled for training so far).
2. **tree**: from the flat run's warm-started weights (its KL reference, the weights before any
   update; no second warm start), ``credit: tree`` with rollouts forked ``--branches`` times after
   the turns ``--branch-at``, evaluated every ``--tree-eval-every`` iterations. A branch's sampled
   calls count from its branch turn on. ``--tree-group-size`` roots per task (default 4 against
   flat's 8): with 2 branches after turn 1 an iteration then samples about as many tool calls as a
   flat one (32 x 3 + 64 x 2 = 224 against 64 x 3 = 192 on shell-look), so both runs update about
   as often per sampled call and differ in how they credit turns.

The target is the flat run's final held-out pass rate; each run's cost is the sampled tool calls at
the first evaluation at or above it (null: not reached). ``ratio`` is tree over flat (issue 37's
target: <= 0.6). One evaluation's pass rate swings with its sampling, so each run's curve is also
averaged over the sampled calls both runs made (``budget``; ``*_mean_pass_rate``). Both runs
evaluate with the same sampling seed, so their ``before_rl`` agree when the warm start is the same
weights. Each run's JSON is kept beside its workdir (``s0-flat.json``); ``--reuse`` takes it instead
of running again when the arguments are the same. These runs take 20-60 minutes each on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from sparring.train.evaluation import calls_to_reach, mean_pass_rate


def demo(
    workdir: Path, family: str, seed: int, sets: list[str], quick: bool = False, reuse: bool = False
) -> dict[str, Any]:
    """One ``sparring demo --json`` run (stderr to ``workdir``.log); its JSON, also kept in ``workdir``.json
    with the arguments that made it. ``reuse``: an earlier invocation's JSON made with the same
    arguments is returned instead of running again (a long comparison continues where it stopped)."""
    args = ["--family", family, "--seed", str(seed), "--json", "--workdir", str(workdir)]
    args += (["--quick"] if quick else []) + [a for s in sets for a in ("--set", s)]
    kept = Path(f"{workdir}.json")
    if reuse and kept.is_file():
        saved = json.loads(kept.read_text())
        if saved.get("args") == args:
            out: dict[str, Any] = saved["result"]
            return out
    exe = Path(sys.executable).with_name("sparring")  # the CLI of this interpreter's environment
    cmd = [str(exe) if exe.exists() else "sparring", "demo", *args]
    with open(f"{workdir}.log", "w") as err:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    if r.returncode != 0:
        sys.exit(f"credit_bench: {' '.join(cmd)} failed (exit {r.returncode}); see {workdir}.log")
    out = json.loads(r.stdout)
    tmp = kept.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({"args": args, "result": out}))
    tmp.replace(kept)  # whole or absent: a stopped bench never leaves half a result to reuse
    return out


def warm_weights(flat: dict[str, Any], flat_dir: Path, into: Path) -> Path:
    """The flat run's warm-started model: its base model folder with the reference weights over it."""
    ref = flat_dir / "checkpoints" / "reference"
    if not ref.is_dir():
        sys.exit(f"credit_bench: {ref} missing: the flat run kept no reference weights")
    shutil.rmtree(into, ignore_errors=True)
    shutil.copytree(flat["model"], into)
    for f in ref.iterdir():
        shutil.copy2(f, into / f.name)
    return into


def summary(run: dict[str, Any]) -> dict[str, Any]:
    return {
        "heldout": run["heldout"],
        "curve": run.get("heldout_curve", []),
        "sampled_tool_calls": sum(int(r.get("sampled_tool_calls", 0)) for r in run["iterations"]),
        "iterations": len(run["iterations"]),
        "seconds": run["seconds"],
    }


def one_seed(a: argparse.Namespace, seed: int) -> dict[str, Any]:
    """The flat run, then the tree run from its warm-started weights; their comparison."""
    flat_dir, tree_dir = a.workdir / f"s{seed}-flat", a.workdir / f"s{seed}-tree"
    flat_sets = [f"iterations={a.flat_iterations}", f"eval_every={a.eval_every}", *a.sets]
    flat = demo(flat_dir, a.family, seed, flat_sets, a.quick, a.reuse)
    warm = warm_weights(flat, flat_dir, a.workdir / f"s{seed}-warm")
    group = [f"group_size={a.tree_group_size}"] if a.tree_group_size else []
    tree = demo(tree_dir, a.family, seed, [
        f"iterations={a.tree_iterations}", f"eval_every={a.tree_eval_every}", "credit=tree",
        f"branch_at={a.branch_at}", f"branches={a.branches}", *group, f"model.path={warm}", "sft_steps=0",
        "model.copy_pretrain_steps=0", *a.sets,
    ], a.quick, a.reuse)  # fmt: skip
    out = {"seed": seed, **compare(summary(flat), summary(tree), flat["heldout"]["after_rl"])}
    print(json.dumps(out), file=sys.stderr, flush=True)
    return out


def compare(flat: dict[str, Any], tree: dict[str, Any], target: float) -> dict[str, Any]:
    """Two runs' summaries compared: the sampled calls each needed to first reach ``target`` (flat's
    final pass rate) and their ratio; and, less at the mercy of one evaluation's sampling, each curve's
    mean pass rate over the calls both runs sampled (``budget``)."""
    f_calls = calls_to_reach(flat["curve"], target)
    t_calls = calls_to_reach(tree["curve"], target)
    budget = min(flat["sampled_tool_calls"], tree["sampled_tool_calls"])
    f_mean, t_mean = mean_pass_rate(flat["curve"], budget), mean_pass_rate(tree["curve"], budget)
    return {
        "target_pass_rate": target, "flat": flat, "tree": tree,
        "flat_calls_to_target": f_calls, "tree_calls_to_target": t_calls,
        "ratio": round(t_calls / f_calls, 3) if t_calls is not None and f_calls else None,
        "budget": budget, "flat_mean_pass_rate": None if f_mean is None else round(f_mean, 4),
        "tree_mean_pass_rate": None if t_mean is None else round(t_mean, 4),
    }  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="shell-look")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--workdir", type=Path, default=Path(".sparring/credit"))
    ap.add_argument("--flat-iterations", type=int, default=12)
    ap.add_argument("--tree-iterations", type=int, default=10)
    ap.add_argument("--branch-at", default="1")
    ap.add_argument("--branches", type=int, default=2)
    ap.add_argument(
        "--eval-every", type=int, default=2, help="The flat run's; the tree run's is --tree-eval-every."
    )
    ap.add_argument(
        "--tree-group-size", type=int, default=4,
        help="Roots per task in a tree batch (0: the flat run's). 4 roots and 2 branches after turn 1 sample about "
        "as many tool calls per iteration as flat's 8 episodes, so both update as often per sampled call.",
    )  # fmt: skip
    ap.add_argument("--tree-eval-every", type=int, default=1, help="The tree run's held-out evaluations.")
    ap.add_argument("--jobs", type=int, default=1, help="Seeds run side by side (each seed's runs in order).")
    ap.add_argument(
        "--reuse", action="store_true",
        help="Reuse a run whose JSON an earlier invocation kept in the workdir with the same arguments.",
    )  # fmt: skip
    ap.add_argument("--quick", action="store_true", help="The demo's --quick configuration: a smoke run.")
    ap.add_argument("--set", dest="sets", action="append", default=[], help="Passed to both runs' config.")
    a = ap.parse_args()
    a.workdir.mkdir(parents=True, exist_ok=True)
    seed_list = [int(s) for s in a.seeds.split(",")]
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:  # each seed's two runs in order, seeds side by side
        seeds = list(pool.map(lambda seed: one_seed(a, seed), seed_list))
    ratios = [s["ratio"] for s in seeds]
    print(json.dumps({
        "family": a.family, "branch_at": a.branch_at, "branches": a.branches, "tree_group_size": a.tree_group_size,
        "flat_iterations": a.flat_iterations, "tree_iterations": a.tree_iterations, "seeds": seeds,
        "ratios": ratios, "tree_reached_target": sum(r is not None for r in ratios), "target_ratio": 0.6,
        "tree_mean_above_flat": sum(
            (s["tree_mean_pass_rate"] or 0) > (s["flat_mean_pass_rate"] or 0) for s in seeds
        ),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
