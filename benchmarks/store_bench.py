"""Trajectory store benchmark; prints one JSON object.

    python benchmarks/store_bench.py [--n 100000] [--batch 200] [--queries 5] [--store PATH]

Writes ``--n`` synthetic trajectories (realistic shape: system/user prompt, a
few tool calls with outputs, varied words, 2% flagged) with ``put_many`` and
reports steps written per second, then the median latency of each kind of
search over the full store (target: <= 100 ms each at 100,000 trajectories).
``--store`` reuses an existing benchmark store (skips writing when it already
holds ``--n``).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore
from sparring.trajectory import ToolStep, Trajectory

WORDS = [
    "assert",
    "clamp",
    "value",
    "range",
    "error",
    "index",
    "list",
    "dict",
    "parse",
    "token",
    "file",
    "path",
    "config",
    "retry",
    "sandbox",
    "judge",
    "reward",
    "policy",
    "server",
    "timeout",
    "buffer",
    "queue",
    "group",
    "sample",
    "spare",
    "stage",
    "limit",
    "status",
    "store",
    "export",
    "replay",
    "failure",
    "cluster",
    "signature",
    "prompt",
    "output",
    "message",
    "function",
    "return",
    "raise",
    "import",
    "module",
    "class",
]
FLAGS = ("test_tampering", "hardcoded_output", "sys_exit", "hidden_path_read", "network_attempt")
STATUSES = ("ok", "ok", "ok", "truncated", "timeout", "policy_error", "infra_error", "judge_error")


def make(i: int, rng: random.Random) -> Trajectory:
    def prose(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    task = f"task-{i % 1000:04d}"
    steps = []
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful software engineer."},
        {"role": "user", "content": f"Fix {task}: {prose(30)}"},
    ]
    for k in range(4):
        cmd = f"pytest -q tests/test_{rng.choice(WORDS)}.py -k case{i}_{k}"
        out = f"FAILED tests/test_x.py::test_{rng.choice(WORDS)} - {prose(25)} run{i}"
        messages.append({"role": "assistant", "content": prose(8), "tool_calls": [
            {"id": f"call_{k}", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": cmd})}}
        ]})  # fmt: skip
        messages.append({"role": "tool", "tool_call_id": f"call_{k}", "content": out})
        steps.append(ToolStep(index=k, tool_call_id=f"call_{k}", name="bash", output=out, exit_code=1))
    status = rng.choice(STATUSES)
    judged = status in ("ok", "truncated", "timeout")
    return Trajectory(
        id=f"bench-{i:07d}", run_id=f"run-{i // 10000}", task_id=task, task_digest="d" * 64,
        family=rng.choice(("code-repair", "function-impl", "data-analysis")), policy="oracle",
        judge_version="j1", status=status, reward=round(rng.random(), 3) if judged else None,
        flags=[rng.choice(FLAGS)] if rng.random() < 0.02 else [], messages=messages, steps=steps,
        created_at=1_700_000_000.0 + i,
    )  # fmt: skip


def timed(fn: Any, repeat: int) -> tuple[float, Any]:
    out: Any = None
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=200, help="Trajectories per put_many transaction.")
    ap.add_argument("--queries", type=int, default=5, help="Repeats per search (median reported).")
    ap.add_argument("--store", type=Path, default=None)
    a = ap.parse_args()
    tmp = None
    if a.store is None:
        tmp = tempfile.TemporaryDirectory(prefix="store-bench-")
        a.store = Path(tmp.name) / "bench.db"
    store = SQLiteStore(a.store)
    res: dict[str, Any] = {"n": a.n, "batch": a.batch}
    have = store.count()
    if have < a.n:
        rng = random.Random(0)
        t0 = time.perf_counter()
        steps = 0
        for lo in range(have, a.n, a.batch):
            batch = [make(i, rng) for i in range(lo, min(a.n, lo + a.batch))]
            steps += sum(len(t.steps) for t in batch)
            store.put_many(batch)
        dt = time.perf_counter() - t0
        res.update(write_seconds=round(dt, 2), trajectories_per_s=round((a.n - have) / dt, 1),
                   steps_per_s=round(steps / dt, 1))  # fmt: skip
        t1 = time.perf_counter()
        one = [make(a.n + k, rng) for k in range(50)]
        for t in one:
            store.put(t)
        res["single_put_ms"] = round((time.perf_counter() - t1) * 1000 / len(one), 3)
    res["stored"] = store.count()
    res["file_mb"] = round(a.store.stat().st_size / 2**20, 1)
    queries = {
        "task": TrajQuery(task_id="task-0042"),
        "family_status": TrajQuery(family="function-impl", status="ok"),
        "reward_range": TrajQuery(min_reward=0.2, max_reward=0.25),
        "flag": TrajQuery(flag="sys_exit"),
        "policy_judge": TrajQuery(policy="oracle", judge_version="j1", status="timeout"),
        "text_rare": TrajQuery(text="case4242_3"),
        "text_common": TrajQuery(text="sandbox judge"),
        "text_in_every_row": TrajQuery(text="pytest -q"),
        "text_and_status": TrajQuery(text="assert clamp", status="infra_error"),
        "no_match": TrajQuery(text="zzqqxx never here"),
        "everything_newest": TrajQuery(),
    }
    lat: dict[str, dict[str, Any]] = {}
    for name, q in queries.items():
        ms, (total, page) = timed(lambda q=q: store.search(q), a.queries)
        lat[name] = {"ms": round(ms, 2), "total": total, "page": len(page)}
    res["search"] = lat
    res["search_max_ms"] = max(v["ms"] for v in lat.values())
    res["target_ms"] = 100
    store.close()
    print(json.dumps(res))
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
