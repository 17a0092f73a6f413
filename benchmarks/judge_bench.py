"""Judge benchmark; prints one JSON object (same as `sparring judge bench --json`).

python benchmarks/judge_bench.py [--tasks 4] [--repeats 3] [--batch 12] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
from pathlib import Path

from sparring.judge.quality.bench import bench_tasks, run_bench
from sparring.sandbox.local.backend import LocalBackend

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch", type=int, default=12)
    ap.add_argument("--concurrency", type=int, default=2)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="judge-bench-") as d:
        tasks = bench_tasks(Path(d), a.tasks)
        print(json.dumps(asyncio.run(run_bench(LocalBackend(), tasks, a.repeats, a.batch, a.concurrency))))
