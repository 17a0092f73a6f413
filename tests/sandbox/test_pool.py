"""The warm pool: reuse after reset, health checks, a maximum size with back-pressure, pinned bytes."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.pool import SandboxPool
from sparring.tasks.sandbox_spec import TaskSpecs
from tests_support import HANG_S, await_until


def run(coro):
    return asyncio.run(coro)


def test_release_resets_and_the_next_acquire_reuses_it(backend, workspace):
    async def body():
        pool = SandboxPool(backend, max_idle=2)
        spec = SandboxSpec(workspace=workspace)
        try:
            a = await pool.acquire_spec(spec)
            await a.exec("echo dirty > /workspace/dirty.txt; sleep 1000 > /dev/null 2>&1 &")
            await pool.release(a)
            b = await pool.acquire_spec(spec)
            listing = await b.list_dir()
            ps = await b.exec("pgrep -c sleep || true")
            await pool.release(b)
            return a.id, b.id, listing, ps.stdout.strip()
        finally:
            await pool.close()

    a, b, listing, procs = run(body())
    assert a == b and "dirty.txt" not in listing and procs == "0"


def test_a_sandbox_that_died_while_idle_is_replaced(backend, workspace):
    async def body():
        pool = SandboxPool(backend, max_idle=2)
        spec = SandboxSpec(workspace=workspace)
        try:
            a = await pool.acquire_spec(spec)
            await pool.release(a)
            os.kill(a.channel.proc.pid, signal.SIGKILL)
            await await_until(lambda: not a.healthy)  # the death is noticed by the channel's reader
            b = await pool.acquire_spec(spec)
            r = await b.exec("echo ok")
            await pool.release(b)
            return a, b, r, pool.replaced_unhealthy
        finally:
            await pool.close()

    a, b, r, replaced = run(body())
    assert a.id != b.id and r.stdout == "ok\n" and replaced == 1
    assert not Path(a.dir).exists()


def test_max_size_applies_back_pressure(backend, workspace):
    async def body():
        pool = SandboxPool(backend, max_idle=1, max_size=2)
        spec = SandboxSpec(workspace=workspace)
        try:
            a = await pool.acquire_spec(spec)
            b = await pool.acquire_spec(spec)
            third = asyncio.ensure_future(pool.acquire_spec(spec))
            await asyncio.sleep(0.3)
            waited = not third.done()
            await pool.release(a)
            c = await asyncio.wait_for(third, HANG_S)
            size = pool.size
            await pool.release(b)
            await pool.release(c)
            return waited, size, pool.max_alive
        finally:
            await pool.close()

    waited, size, max_alive = run(body())
    assert waited and size == 2 and max_alive == 2


def test_acquire_for_a_task_pins_its_workspace(backend, clamp_task):
    async def body():
        pool = SandboxPool(backend)
        try:
            sb = await pool.acquire_spec(await TaskSpecs()(clamp_task))
            lower = sb.lower
            await pool.release(sb)
            return lower
        finally:
            await pool.close()

    lower = run(body())
    assert lower.name.startswith("ws-") and lower.parent == backend.root / "layers"


def test_a_sandbox_reset_cannot_clear_is_closed_instead_of_reused(backend, workspace, tmp_path):
    # an extra writable mount is a host directory that reset leaves as it is: the next user would see it
    out = tmp_path / "out"
    out.mkdir()

    async def body():
        pool = SandboxPool(backend, max_idle=2)
        spec = SandboxSpec(workspace=workspace, extra_rw={"/judge/out": out})
        try:
            a = await pool.acquire_spec(spec)
            await a.exec("echo left > /judge/out/leftover")
            reusable = a.reusable
            await pool.release(a)
            b = await pool.acquire_spec(spec)
            await pool.release(b)
            return a, b, reusable
        finally:
            await pool.close()

    a, b, reusable = run(body())
    assert (out / "leftover").read_text() == "left\n"  # positive control: the write reached the host dir
    assert not reusable and a.closed and a.id != b.id


def test_a_sandbox_beyond_max_idle_is_closed_without_reset_or_ready(backend, workspace):
    """Released when its spec has no idle room left, a sandbox is closed as it is: no reset, no ``on_ready``
    (a judge pool would start a launcher there that nobody could take). Releases racing for the last place
    keep exactly ``max_idle``."""
    readied: list[str] = []

    async def body():
        pool = SandboxPool(backend, max_idle=1, on_ready=lambda sb: readied.append(sb.id))
        spec = SandboxSpec(workspace=workspace)
        try:
            sbs = [await pool.acquire_spec(spec) for _ in range(3)]
            resets = {sb.id: 0 for sb in sbs}
            for sb in sbs:
                real = sb.reset

                async def counted(real=real, sid=sb.id):
                    resets[sid] += 1
                    await real()

                sb.reset = counted  # type: ignore[method-assign]
            await asyncio.gather(*(pool.release(sb) for sb in sbs))
            return [sb.id for sb in sbs], resets, len(pool.idle(spec)), pool.size
        finally:
            await pool.close()

    made, resets, idle, size = run(body())
    assert idle == 1 and size == 1
    assert sum(resets.values()) == 1  # only the one kept
    assert readied == [*made, next(s for s, n in resets.items() if n)]  # made (3), then the kept one's reset
