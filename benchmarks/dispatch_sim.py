"""Simulation of the distributed driver at scale; prints one JSON object.

    python benchmarks/dispatch_sim.py [--episodes 1000,10000] [--nodes 20] [--steps 6]
                                      [--policy-ms 50] [--judge-ms 320]

N episodes, all in flight at once, over ``--nodes`` *simulated* nodes. The
driver is the real one: :class:`~sparring.rollout.scheduler.RolloutScheduler`
(groups, ids, statuses, the one batch writer into a real SQLite store) with the
real :class:`~sparring.distributed.driver.NodeDriver` (least-loaded dispatch
within per-node capacity, the episode's wire record pickled as Ray would,
the trajectory JSON parsed back). Only the nodes are fake: a
``SimulatedNode`` holds ``FakeSandbox`` latencies instead of sandboxes. Its
latency model is measured here, first: the medians of real sandbox create and
``exec`` on this machine (``latency_model``); the policy's turn and the judge's
run are parameters (defaults: a fast inference server, and the ~320 ms judged
episode measured in issue 17).

Reported per size: ``driver_cpu_ms_per_episode`` (this process's CPU time,
which is the driver's: the simulated nodes only sleep), ``driver_cpu_ms_per_tool_call``
(the same over the episodes' tool calls: tool calls never reach the driver,
they run on the nodes), ``wall_s``, the ideal wall time of one episode, the
driver's peak RSS growth, and per-node dispatch counts and peak load (never
above capacity). ``growth`` compares the largest size with the smallest.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sparring.distributed.driver import DriverOptions, NodeDriver
from sparring.distributed.node import EpisodeWire
from sparring.policy.scripted import OraclePolicy
from sparring.rollout.scheduler import RolloutScheduler
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.loader import Task
from sparring.trajectory import ToolStep, Trajectory


def measure_latency(samples: int = 8) -> dict[str, Any]:
    """Real sandbox create and exec medians on this machine (the fake sandboxes' latency model)."""
    from sparring.sandbox.base import SandboxSpec
    from sparring.sandbox.local.backend import LocalBackend

    async def go() -> dict[str, Any]:
        be = LocalBackend()
        ws = Path(tempfile.mkdtemp(prefix="sim-ws-"))
        (ws / "a.txt").write_text("x\n")
        create, execs = [], []
        for _ in range(samples):
            t = time.perf_counter()
            sb = await be.create(SandboxSpec(workspace=ws))
            create.append((time.perf_counter() - t) * 1000)
            for _ in range(3):
                t = time.perf_counter()
                await sb.exec(["true"], timeout=10)
                execs.append((time.perf_counter() - t) * 1000)
            await sb.close()
        return {"create_ms": create, "exec_ms": execs}

    return asyncio.run(go())


class FakeSandbox:
    """Not a sandbox: the latencies of one, drawn from the measured samples."""

    def __init__(self, model: dict[str, Any], rng: random.Random) -> None:
        self.model, self.rng = model, rng

    def create_s(self) -> float:
        return float(self.rng.choice(self.model["create_ms"])) / 1000

    def exec_s(self) -> float:
        return float(self.rng.choice(self.model["exec_ms"])) / 1000


class SimulatedNode:
    """A node that plays an episode by waiting as long as a real one would, then answers with a
    trajectory JSON of realistic size (built once, its id substituted)."""

    def __init__(self, node_id: str, model: dict[str, Any], template: str, steps: int, policy_s: float,
                 judge_s: float, seed: int) -> None:  # fmt: skip
        self.node_id = node_id
        self.sandbox = FakeSandbox(model, random.Random(seed))
        self.template, self.steps, self.policy_s, self.judge_s = template, steps, policy_s, judge_s
        self.in_flight = self.max_in_flight = 0

    async def run(self, payload: bytes) -> str:
        wire: EpisodeWire = pickle.loads(payload)  # what the node would receive
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            sb = self.sandbox
            await asyncio.sleep(
                sb.create_s() + sum(self.policy_s + sb.exec_s() for _ in range(self.steps)) + self.judge_s
            )
            return self.template.replace("TRAJ_ID", wire.traj_id).replace("GROUP_ID", wire.group_id)
        finally:
            self.in_flight -= 1


class SimDriver(NodeDriver):
    """The real driver; its transport hands the pickled wire record to an in-process node."""

    def __init__(self, nodes: dict[str, SimulatedNode], capacity: int, root: Path) -> None:
        from sparring.rollout.run_records import SchedulerConfig

        super().__init__({n: capacity for n in nodes}, SchedulerConfig(), DriverOptions(), root)
        self.sim = nodes

    def _submit(
        self, node_id: str, wire: EpisodeWire, task_ref: Any, blob_refs: dict[str, Any] | None = None
    ) -> tuple[asyncio.Future[str], Any]:
        fut = asyncio.ensure_future(self.sim[node_id].run(pickle.dumps(wire)))
        return fut, fut

    def _cancel(self, handle: Any) -> None:
        handle.cancel()


def _template(task: Task, steps: int) -> str:
    t = Trajectory(
        id="TRAJ_ID", task_id=task.id, task_digest=task.digest, group_id="GROUP_ID", policy="oracle", status="ok",
        reward=1.0, components={"correctness": 1.0}, attempts=1,
        messages=[{"role": "system", "content": "s" * 400}, {"role": "user", "content": "u" * 600}]
        + [m for i in range(steps) for m in (
            {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function",
             "function": {"name": "bash", "arguments": json.dumps({"command": "cat main.py"})}}]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": "o" * 300})],
        steps=[ToolStep(index=i, tool_call_id=f"c{i}", name="bash", arguments={"command": "cat main.py"},
                        output="o" * 300, exit_code=0, duration_ms=2.0) for i in range(steps)],
    )  # fmt: skip
    return t.model_dump_json()


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def run_size(
    n: int, n_nodes: int, task: Task, model: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="sim-driver-"))
    per_node = -(-n // n_nodes)
    template = _template(task, args.steps)
    nodes = {f"sim-node-{i:02d}": SimulatedNode(f"sim-node-{i:02d}", model, template, args.steps,
                                                 args.policy_ms / 1000, args.judge_ms / 1000, i)
             for i in range(n_nodes)}  # fmt: skip
    store = SQLiteStore(root / "store.db")
    driver = SimDriver(nodes, per_node, root)
    sched = RolloutScheduler(None, None, store, runner=driver, replay_rounds=0)
    group = 8
    tasks = [task] * (n // group)
    peak = [0.0]

    async def go() -> Any:
        async def watch() -> None:
            while True:
                peak[0] = max(peak[0], _rss_mb())
                await asyncio.sleep(0.05)

        w = asyncio.ensure_future(watch())
        try:
            return await sched.run(tasks, OraclePolicy(), group, run_id=f"sim-{n}", keep_trajectories=False)
        finally:
            w.cancel()

    rss0 = _rss_mb()
    c0, w0 = time.process_time(), time.perf_counter()
    summary = asyncio.run(go())
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    store.close()
    episodes = summary.stored
    ideal = (statistics.median(model["create_ms"]) + args.steps * (args.policy_ms + statistics.median(model["exec_ms"]))
             + args.judge_ms) / 1000  # fmt: skip
    return {
        "episodes": episodes, "statuses": summary.statuses, "nodes": n_nodes, "capacity_per_node": per_node,
        "wall_s": round(wall, 3), "ideal_episode_s": round(ideal, 3),
        "driver_cpu_s": round(cpu, 3),
        "driver_cpu_ms_per_episode": round(1000 * cpu / max(episodes, 1), 4),
        "driver_cpu_ms_per_tool_call": round(1000 * cpu / max(episodes * args.steps, 1), 4),
        "driver_rss_mb_peak_growth": round(max(peak[0], _rss_mb()) - rss0, 1),
        "driver_rss_kb_per_episode": round(1024 * (max(peak[0], _rss_mb()) - rss0) / max(episodes, 1), 2),
        "max_in_flight_per_node": max(x.max_in_flight for x in nodes.values()),
        "dispatched_min_max": [min(driver.dispatch.counts().values()), max(driver.dispatch.counts().values())],
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", default="1000,10000")
    ap.add_argument("--nodes", type=int, default=20)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--policy-ms", type=float, default=50.0)
    ap.add_argument("--judge-ms", type=float, default=320.0)
    args = ap.parse_args(argv)
    from sparring.tasks.families import generate

    task = generate("shell-ops", 1, 0, Path(tempfile.mkdtemp(prefix="sim-task-")) / "t")[0]
    raw = measure_latency()
    model = {k: v for k, v in raw.items()}
    sizes = [int(x) for x in args.episodes.split(",")]
    results = [run_size(n, args.nodes, task, model, args) for n in sizes]
    small, big = results[0], results[-1]
    out = {
        "latency_model": {"fake_sandbox_create_ms_median": round(statistics.median(raw["create_ms"]), 3),
                          "fake_sandbox_exec_ms_median": round(statistics.median(raw["exec_ms"]), 3),
                          "measured_on": "this machine (LocalBackend)", "policy_ms": args.policy_ms,
                          "judge_ms": args.judge_ms},
        "sizes": results,
        "growth": {
            "episodes_ratio": round(big["episodes"] / max(small["episodes"], 1), 2),
            "cpu_per_episode_ratio": round(big["driver_cpu_ms_per_episode"] / max(small["driver_cpu_ms_per_episode"], 1e-9), 3),
            "rss_growth_ratio": round(big["driver_rss_mb_peak_growth"] / max(small["driver_rss_mb_peak_growth"], 1e-9), 2),
        },
        "targets": {"ms_per_episode": 1.0, "ms_per_tool_call": 2.0,
                    "met": big["driver_cpu_ms_per_episode"] <= 1.0 and big["driver_cpu_ms_per_tool_call"] <= 2.0},
    }  # fmt: skip
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
