"""A prestarted command: started before its input exists, told what to do later, killed by reset."""

from __future__ import annotations

import asyncio
import time

import pytest

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.pool import SandboxPool
from tests_support import HANG_S

# Reads its stdin only when told, then a file that did not exist when it started.
LATE_READER = "import sys; job = sys.stdin.read(); print(job, open('/workspace/late.txt').read())"


async def _until_ok(sb, check: str) -> bool:
    """Whether the shell command ``check`` succeeds in ``sb`` within HANG_S (polled)."""
    deadline = time.monotonic() + HANG_S
    while (await sb.exec(check)).exit_code != 0:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def test_a_prestarted_command_runs_on_what_it_is_sent_later(backend, workspace):
    async def go():
        sb = await backend.create(SandboxSpec(workspace=workspace))
        try:
            warm = sb.prestart(["python", "-c", LATE_READER])
            await sb.write_file("late.txt", b"written after the start")
            assert warm.alive
            r = await warm.run(b"job-1", timeout=30)
            with pytest.raises(SandboxError, match="runs once"):
                await warm.run(b"again")
            return r, warm.alive
        finally:
            await sb.close()

    r, alive = asyncio.run(go())
    assert r.exit_code == 0, r.stderr
    assert r.stdout.strip() == "job-1 written after the start"
    assert not alive


def test_timeout_counts_from_the_run_not_the_start(backend, workspace):
    async def go():
        sb = await backend.create(SandboxSpec(workspace=workspace))
        try:
            warm = sb.prestart(
                [
                    "python",
                    "-c",
                    "import pathlib, sys; pathlib.Path('/tmp/up').touch(); sys.stdin.read(); print('ok')",
                ]
            )
            # Once it is up (its start-up, slow on a loaded host, is not what is measured), it waits for
            # longer than its budget: a budget counted from the start would be spent before the run.
            assert await _until_ok(sb, "test -e /tmp/up")
            await asyncio.sleep(3.0)  # waiting for stdin is not running: no budget spent
            fast = await warm.run(b"", timeout=2)
            slow = sb.prestart(["python", "-c", "import sys, time; sys.stdin.read(); time.sleep(30)"])
            hung = await slow.run(b"", timeout=0.5)
            return fast, hung
        finally:
            await sb.close()

    fast, hung = asyncio.run(go())
    assert fast.exit_code == 0 and fast.stdout.strip() == "ok" and not fast.timed_out
    assert hung.timed_out and hung.exit_code == 124


def test_reset_kills_an_unused_prestarted_command(backend, workspace):
    if getattr(backend, "mode", "") != "overlay":
        pytest.skip("reset kills every process only where reset discards everything (overlay mode)")

    async def go():
        sb = await backend.create(SandboxSpec(workspace=workspace))
        try:
            warm = sb.prestart(["python", "-c", "import sys; sys.stdin.read()"])
            # the control: it runs (the server's forked child may not have exec'd python yet under load)
            before = await _until_ok(sb, "ps -eo args | grep -q '^python -c import sys; sys.stdin.read()'")
            await sb.reset()
            await asyncio.sleep(0.05)
            after = (await sb.exec("ps -eo args | grep -c '^python -c import sys; sys.stdin.read()'")).stdout
            return before, after.strip(), warm.alive
        finally:
            await sb.close()

    before, after, alive = asyncio.run(go())
    assert before  # the control: it was running
    assert after == "0" and not alive


def test_the_pool_readies_every_sandbox_it_makes_or_resets(backend, workspace):
    seen: list[str] = []

    async def go():
        pool = SandboxPool(backend, max_idle=1, on_ready=lambda sb: seen.append(sb.id))
        try:
            spec = SandboxSpec(workspace=workspace)
            a = await pool.acquire_spec(spec)
            await pool.release(a)
            b = await pool.acquire_spec(spec)
            other = await pool.acquire_idle(spec)  # the only one is taken: nothing idle, no waiting
            await pool.release(b)
            again = await pool.acquire_idle(spec)
            assert again is not None
            await pool.release(again)
            return a.id, b.id, other
        finally:
            await pool.close()

    a, b, other = asyncio.run(go())
    assert other is None
    if getattr(backend, "mode", "") == "overlay":
        assert a == b and seen == [a, a, a, a]  # made, then reset three times
    else:
        assert seen and seen[0] == a
