"""Per-family admission yield; prints one JSON object per family (same as `sparring tasks family-bench`).

Per family: generate N tasks from a seed, count the distinct ones (content digest; also distinct
instructions and reference solutions), run admission on K of them spread evenly (all by default) in parallel
within a worker limit, and report admitted, rejected by rule and wall seconds per task, with a
projection for all N when only K were checked.

python benchmarks/family_admission.py [--families function-impl,sql] [--n 200] [--seed 0] [--admit K]
    [--concurrency 3] [--judge-concurrency 2*cpus] [--repeats REFERENCE_RUNS] [--per-seed M]
"""

from __future__ import annotations

import argparse
import asyncio
import json

from sparring.admission.family_bench import run_family_admission
from sparring.cli.family_bench import ALL_FAMILIES
from sparring.sandbox.config import backend_config, make_backend

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=ALL_FAMILIES)
    ap.add_argument("--n", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--admit",
        type=int,
        default=None,
        help="Check only K, spread evenly over the N (0: generate-only count)",
    )
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--judge-concurrency", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None, help="Reference runs (default: the flake target's)")
    ap.add_argument("--backend", default="local", help="Sandbox backend: local or oci")
    ap.add_argument(
        "--per-seed", type=int, default=None, help="At most M tasks per seed; N spans consecutive seeds"
    )
    a = ap.parse_args()
    backend = make_backend(backend_config(a.backend))
    for fam in a.families.split(","):
        res = run_family_admission(
            backend, fam, a.n, a.seed, a.admit, a.concurrency, a.judge_concurrency, a.repeats,
            per_seed=a.per_seed,
        )  # fmt: skip
        print(json.dumps(asyncio.run(res)), flush=True)
