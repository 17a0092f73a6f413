"""Sandbox lifecycle benchmark; prints one JSON object (same as `sparring sandbox bench --json`).

python benchmarks/sandbox_bench.py [--n 50] [--concurrency 4] [--alive 500] [--podman] [--prefork 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json

from sparring.sandbox.bench import run_bench

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--files", type=int, default=1000)
    ap.add_argument("--changed", type=int, default=10)
    ap.add_argument("--execs", type=int, default=20)
    ap.add_argument("--alive", type=int, default=0)
    ap.add_argument("--podman", action="store_true")
    ap.add_argument("--no-limits", action="store_true")
    ap.add_argument(
        "--prefork", type=int, default=2, help="pre-started sandboxes per shape (0: cold path only)"
    )
    a = ap.parse_args()
    res = run_bench(
        a.n, a.concurrency, a.files, a.changed, a.execs, a.alive, a.podman, not a.no_limits, a.prefork
    )
    print(json.dumps(asyncio.run(res)))
