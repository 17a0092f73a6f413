"""The Ray executor on a real multi-node Ray cluster on this machine (``ray.cluster_utils.Cluster``).

A head (no sandboxes) and two sandbox nodes advertising ``sparring_node: 2``;
real sandboxes, the real judge, the oracle policy. One cluster for the module:
starting one costs ~10 s on this machine. The tests run in file order; the
last one adds a third node and removes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import ray
from ray.cluster_utils import Cluster

from sparring.distributed import RayOptions, make_executor
from sparring.distributed.ray_runner import NODE_RESOURCE
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.isolation import mounts
from sparring.sandbox.isolation.reaper import sandbox_home
from sparring.store.base import TrajQuery
from sparring.store.sqlite import SQLiteStore
from sparring.trajectory import Trajectory
from tests_support import HANG_S, await_until

pytestmark = pytest.mark.slow
CAP = 2


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False})
    for _ in range(2):
        c.add_node(num_cpus=1, resources={NODE_RESOURCE: CAP})
    ray.init(address=c.address, include_dashboard=False, log_to_driver=False)
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def _executor(tmp_path: Path, store: SQLiteStore) -> Any:
    sched = RolloutScheduler(None, None, store, max_retries=1, replay_rounds=1)
    # The default probe window: a killed actor's restart took over 30 s on a loaded CI machine, and a
    # node dropped as gone never comes back (a machine that left the cluster is dropped at once).
    return make_executor("ray", sched, RayOptions(root=tmp_path / "nodes"))


def _accounted(store: SQLiteStore, run_id: str, expected: int) -> list[Trajectory]:
    """Every requested sample stored exactly once; no failure carries a reward (never 0)."""
    total, trajs = store.search(TrajQuery(run_id=run_id, limit=None))
    assert total == expected == len({t.id for t in trajs}), f"{total} stored, {expected} requested"
    assert len({(t.group_id, t.sample_index) for t in trajs}) == expected
    for t in trajs:
        if t.status in ("infra_error", "policy_error", "judge_error"):
            assert t.reward is None and t.error, (t.status, t.reward)
        if t.attempts > 1:
            assert len(t.infra_errors) >= t.attempts - 1
    return trajs


def _leftovers(roots: list[Path], seen: list[tuple[str, list[str]]]) -> list[str]:
    out = [f"dir {d}" for d, _ in seen if Path(d).exists()]
    out += [f"cgroup {c}" for _, cgs in seen for c in cgs if Path(c).exists()]
    for root in roots:
        home = sandbox_home(root / "sandboxes")
        out += [f"dir {d}" for d in home.glob("sb-*")]
        out += [f"mount {m}" for m in mounts.mounts_below(home)]
    return out


def _node_roots(tmp_path: Path) -> list[Path]:
    return sorted((tmp_path / "nodes").glob("node-*"))


async def _busy_node(ex: Any) -> tuple[str, list[tuple[str, list[str]]]]:
    """A node with an episode in a live sandbox right now, and its sandboxes (with their cgroups)."""
    found: dict[str, Any] = {}

    def check() -> bool:
        for node_id, actor in ex.runner.actors.items():
            if ex.runner.dispatch.nodes[node_id].state != "up":
                continue
            live = ray.get(actor.live_sandboxes.remote(), timeout=HANG_S)
            if any(cgs for _, cgs in live):
                found.update(node=node_id, live=live)
                return True
        return False

    assert await await_until(check, timeout_s=120, interval_s=0.05), "no episode ever reached a sandbox"
    return found["node"], found["live"]


def test_episodes_spread_over_the_nodes_within_capacity_and_tasks_ship_once(cluster, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")

    async def go() -> Any:
        ex = _executor(tmp_path, store)
        try:
            s = await ex.rollout([clamp_task], _oracle(), 8, run_id="spread", seed=0)
            return (
                s,
                ex.runner.node_stats(),
                {n: (x.max_in_flight, x.capacity) for n, x in ex.runner.dispatch.nodes.items()},
            )
        finally:
            await ex.aclose()

    summary, stats, loads = asyncio.run(go())
    assert summary.requested == summary.stored == 8 and summary.statuses == {"ok": 8}, summary
    assert len(summary.nodes) == 2 and all(n >= 2 for n in summary.nodes.values()), summary.nodes
    assert sum(summary.nodes.values()) == 8
    for node_id, st in stats.items():
        assert 1 <= st["max_in_flight"] <= CAP, st  # the node's own count
        assert st["tasks_unpacked"] == 1, st  # by digest, once per node, never per episode
        assert loads[node_id][0] <= loads[node_id][1] == CAP
    _accounted(store, "spread", 8)
    assert _leftovers(_node_roots(tmp_path), []) == []


def test_a_killed_node_actor_loses_no_sample_and_leaves_nothing(cluster, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")

    async def go() -> Any:
        ex = _executor(tmp_path, store)
        try:
            run = asyncio.ensure_future(ex.rollout([clamp_task], _oracle(), 8, run_id="kill", seed=0))
            node, live = await _busy_node(ex)
            old_pid = ray.get(ex.runner.actors[node].stats.remote())["pid"]
            ray.kill(ex.runner.actors[node], no_restart=False)  # SIGKILL mid-episode; Ray restarts it
            summary = await run
            new = await await_until(lambda: ex.runner.node_stats().get(node), timeout_s=180)
            return summary, live, old_pid, new
        finally:
            await ex.aclose()

    summary, live, old_pid, new = asyncio.run(go())
    trajs = _accounted(store, "kill", 8)
    assert summary.stored == 8 and summary.statuses == {"ok": 8}, summary
    lost = [t for t in trajs if any("lost the episode" in e for e in t.infra_errors)]
    assert lost, "the killed actor had an episode in flight: it must show as a retried attempt"
    assert all(t.attempts >= 2 and t.status == "ok" and t.reward == 1.0 for t in lost)
    assert new and new["pid"] != old_pid, "the node actor was restarted in a new process"
    roots = _node_roots(tmp_path)
    # the node's watchdog reaps what a lost node left; on a loaded CI machine that can take a while
    assert live and asyncio.run(await_until(lambda: not _leftovers(roots, live), timeout_s=180))


def _cli(*args: str, root: Path, **extra_env: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARRING_RAY_ROOT": str(root), **extra_env}
    env.pop("SPARRING_DEBUG", None)
    return subprocess.run([str(Path(sys.executable).parent / "sparring"), *args, "--json"], capture_output=True,
                          text=True, env=env, timeout=600)  # fmt: skip


def test_rollout_cli_runs_on_the_cluster_given_by_address(cluster, clamp_task, tmp_path):
    r = _cli("rollout", "--tasks", str(clamp_task.path), "--policy", "oracle", "--group-size", "4",
             "--store", str(tmp_path / "s.db"), "--executor", "ray", "--ray-address", cluster.address,
             root=tmp_path / "nodes")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["requested"] == out["stored"] == 4 and out["statuses"] == {"ok": 4}, out
    assert len(out["nodes"]) == 2 and sum(out["nodes"].values()) == 4, out  # the cluster's two nodes


def test_without_an_address_the_rollout_starts_its_own_cluster_even_beside_another(
    cluster, clamp_task, tmp_path
):
    """Another cluster runs on this machine and RAY_ADDRESS names it (as a shell that once used it
    would): a rollout given no --ray-address still starts and uses an embedded one-node cluster of its
    own, never joins the other (which it did, and then failed, while a second suite's cluster ran)."""
    assert len([n for n in ray.nodes() if n["Alive"]]) == 3  # positive control: the other cluster is up
    r = _cli("rollout", "--tasks", str(clamp_task.path), "--policy", "oracle", "--group-size", "2",
             "--store", str(tmp_path / "s.db"), "--executor", "ray", "--concurrency", "2",
             root=tmp_path / "nodes", RAY_ADDRESS=cluster.address)  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["stored"] == 2 and out["statuses"] == {"ok": 2}, out
    assert list(out["nodes"].values()) == [2], out  # one embedded node, not the other cluster's two


def test_eval_cli_runs_on_the_cluster_given_by_address(cluster, clamp_task, tmp_path):
    r = _cli("eval", "--tasks", str(clamp_task.path), "--policy", "oracle", "--group-size", "2",
             "--store", str(tmp_path / "s.db"), "--executor", "ray", "--ray-address", cluster.address,
             root=tmp_path / "nodes")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["split"] == "eval" and out["stored"] == 2 and out["pass_rate"] == 1.0, out
    assert sum(out["nodes"].values()) == 2, out


def test_train_runs_its_rollouts_on_the_cluster(cluster, tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(TRAIN_CONFIG + f"workdir: {tmp_path / 'w'}\n")
    r = _cli("train", "--config", str(cfg), "--set", "executor=ray", "--set", f"ray_address={cluster.address}",
             root=tmp_path / "nodes")  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rows = out["iterations"]
    assert len(rows) == 2 and all(sum(row["statuses"].values()) == row["rollouts"] == 4 for row in rows), rows
    store = SQLiteStore(Path(out["store"]))
    total, trajs = store.search(TrajQuery(run_id=out["run_id"], limit=None))
    pids = {t.timings.get("node_pid") for t in trajs}
    assert total == 8 and None not in pids and len(pids) == 2, pids  # played by the two node actors


TRAIN_CONFIG = """
family: shell-ops
n_train: 2
n_heldout: 1
seed: 3
sft_steps: 2
sft_batch: 2
iterations: 2
tasks_per_iteration: 2
group_size: 2
max_steps: 2
heldout_max_steps: 2
resample_rounds: 0
checkpoint_every: 0
monitor: {exporters: []}
model: {hidden: 32, layers: 1, heads: 4, vocab_size: 600, max_new_tokens: 12}
warm_start: {teacher: noisy, epsilon: 0.5, samples: 1, passed_only: false}
grpo: {minibatches: 2}
"""


def test_a_removed_node_loses_no_sample_and_leaves_nothing(cluster, clamp_task, tmp_path):
    extra = cluster.add_node(num_cpus=1, resources={NODE_RESOURCE: CAP})
    cluster.wait_for_nodes()
    store = SQLiteStore(tmp_path / "s.db")

    async def go() -> Any:
        ex = _executor(tmp_path, store)
        try:
            run = asyncio.ensure_future(ex.rollout([clamp_task], _oracle(), 8, run_id="remove", seed=0))
            target = extra.node_id

            def busy() -> bool:
                live = ray.get(ex.runner.actors[target].live_sandboxes.remote(), timeout=HANG_S)
                return bool(any(cgs for _, cgs in live)) and bool(found.update(live=live) or True)

            found: dict[str, Any] = {}
            assert await await_until(busy, timeout_s=120, interval_s=0.05)
            await asyncio.to_thread(cluster.remove_node, extra)  # the machine leaves mid-episode
            summary = await run
            return summary, found["live"], ex.runner.dispatch.nodes[target].state
        finally:
            await ex.aclose()

    summary, live, state = asyncio.run(go())
    trajs = _accounted(store, "remove", 8)
    assert summary.stored == 8 and summary.statuses == {"ok": 8}, summary
    assert any(t.attempts >= 2 for t in trajs) and state == "gone"
    roots = _node_roots(tmp_path)
    assert live
    # What the lost node left is reaped when that machine next runs a node (its backend reaps its root at
    # start). The watchdog alone does not always get there: removing the node can kill it mid-reap (an
    # open issue-17 bug), so this test brings the machine back instead of waiting on it.
    from sparring.sandbox.local.backend import LocalBackend

    for root in roots:
        LocalBackend(root=root / "sandboxes")
    assert asyncio.run(await_until(lambda: not _leftovers(roots, live), timeout_s=60)), _leftovers(
        roots, live
    )


def _oracle() -> Any:
    from sparring.policy.scripted import OraclePolicy

    return OraclePolicy()
