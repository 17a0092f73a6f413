"""Admission throughput benchmark; prints one JSON object (same as `sparring tasks bench --json`).

python benchmarks/admission_bench.py [--n 12] [--families data-analysis,function-impl,code-repair]
    [--concurrency 3] [--judge-concurrency 2*cpus] [--repeats REFERENCE_RUNS]
"""

from __future__ import annotations

import argparse
import asyncio
import json

from sparring.admission.bench import run_admission_bench
from sparring.sandbox.config import backend_config, make_backend

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=12)
    ap.add_argument("--families", default="data-analysis,function-impl,code-repair")
    ap.add_argument("--concurrency", type=int, default=3)
    ap.add_argument("--judge-concurrency", type=int, default=None)
    ap.add_argument("--repeats", type=int, default=None, help="Reference runs (default: the flake target's)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="local", help="Sandbox backend: local or oci")
    a = ap.parse_args()
    res = run_admission_bench(
        make_backend(backend_config(a.backend)),
        a.n,
        a.families.split(","),
        a.concurrency,
        a.repeats,
        a.seed,
        a.judge_concurrency,
    )
    print(json.dumps(asyncio.run(res)))
