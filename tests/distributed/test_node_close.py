"""A node's close ends what its backend holds between sandboxes: pre-started ones (prefork) stop with
the node instead of waiting for the watchdog to notice the process is gone."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sparring.distributed.node import NodeConfig, NodeWorker
from sparring.rollout.run_records import SchedulerConfig
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.config import LocalBackendConfig
from sparring.sandbox.isolation import mounts
from tests_support import ROOT_ONLY

pytestmark = ROOT_ONLY


def test_closing_a_node_stops_its_prestarted_sandboxes(tmp_path: Path) -> None:
    cfg = NodeConfig(
        root=tmp_path, capacity=1, scheduler=SchedulerConfig(), backend=LocalBackendConfig(prefork=2)
    )

    async def main() -> tuple[list[Path], list[int]]:
        node = NodeWorker("n" * 16, cfg)
        prefork = node.backend.prefork
        assert prefork is not None
        # positive control: two sandboxes started and waiting, their exec servers running
        assert await prefork.fill(SandboxSpec()) == 2
        waiting = prefork.idle()
        dirs, pids = [sb.dir for sb in waiting], [sb.server_host_pid() for sb in waiting]
        assert all(d.is_dir() for d in dirs) and all(Path(f"/proc/{p}").exists() for p in pids)
        await node.close()
        assert prefork.idle() == []
        return dirs, pids

    dirs, pids = asyncio.run(main())
    assert [d for d in dirs if d.exists() or mounts.mounts_below(d)] == []
    assert [p for p in pids if Path(f"/proc/{p}").exists() and "zombie" not in _state(p)] == []


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split("\n")[0]
    except (OSError, IndexError):
        return "zombie"
