"""A task's sandbox, as a :class:`~sparring.sandbox.base.SandboxSpec`: workspace, limits, pinned layer.

The sandbox room knows nothing of tasks (the layering: tests/test_layering.py): its pool and backends
take resolved specs. Resolving one is a task-room job (the limits and the
environment are the task's), done here once for every entry point: rollouts,
the Environment, replay and the judge, whose sandbox carries the same layer.
"""

from __future__ import annotations

import asyncio

from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.storage.layers import tree_digest
from sparring.tasks.environment import alayer_for, layer_for
from sparring.tasks.loader import Task


def spec_for_task(task: Task, seed: int = 0, workspace_digest: str | None = None) -> SandboxSpec:
    """The sandbox of ``task``: its workspace (also at the image's own path of it, where the task names one),
    limits and pinned environment layer (built on first use; on the event loop use :func:`aspec_for_task`).
    The judge's sandbox carries the same layer, image and workspace path."""
    lim = task.spec.limits
    return SandboxSpec(
        workspace=task.workspace,
        workspace_digest=workspace_digest,
        environment=layer_for(task.spec.environment).ref(),
        image=task.spec.environment.image,
        workspace_alias=task.spec.environment.workspace,  # /testbed: the same live workspace there too
        network=lim.network,
        memory_mb=lim.memory_mb,
        pids=lim.pids,
        cpus=lim.cpus,
        disk_mb=lim.disk_mb,
        seed=seed,
    )


async def aspec_for_task(task: Task, seed: int = 0, workspace_digest: str | None = None) -> SandboxSpec:
    """:func:`spec_for_task` for the event loop: a layer not built yet is built in a thread."""
    await alayer_for(task.spec.environment)
    return spec_for_task(task, seed=seed, workspace_digest=workspace_digest)


class TaskSpecs:
    """Resolves tasks to sandbox specs for a pool: ``await specs(task)``.

    ``pin_workspaces``: each task version's workspace is pinned by digest (computed once per task
    version, in a thread), so every sandbox of a task mounts the same verified bytes.
    """

    def __init__(self, pin_workspaces: bool = True) -> None:
        self.pin_workspaces = pin_workspaces
        self._digests: dict[tuple[str, str], str] = {}

    async def __call__(self, task: Task) -> SandboxSpec:
        digest = None
        if self.pin_workspaces:
            key = (task.spec.id, task.digest)
            digest = self._digests.get(key)
            if digest is None:
                digest = await asyncio.to_thread(tree_digest, task.workspace)
                self._digests[key] = digest
        return await aspec_for_task(task, workspace_digest=digest)
