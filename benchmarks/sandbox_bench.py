"""Sandbox lifecycle benchmark; prints one JSON object (same as `sparring sandbox bench --json`).

    python benchmarks/sandbox_bench.py [--n 50] [--concurrency 4]
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
    a = ap.parse_args()
    print(json.dumps(asyncio.run(run_bench(a.n, a.concurrency))))
