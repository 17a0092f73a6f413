"""An owner SIGKILLed between two steps of making a sandbox, or a reaper between two steps of removing
one, leaves nothing a later reap does not remove: no directory, mount or cgroup (issue 17).

The leftover issue 17 found: a node actor killed between a sandbox's mkdir and its owner file left an
unowned ``sb-*`` directory (and cgroups) that every reaper skipped as "being created". Each test kills a
real backend process at one named point (``SPARRING_CRASH_AT``, see sandbox/crashpoint.py: a SIGKILL
there, no sleep), checks that the leftover really is there (the positive control), then reaps.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sparring.sandbox.crashpoint import ENV
from sparring.sandbox.isolation import mounts, reaper
from tests_support import ROOT_ONLY, wait_until

pytestmark = ROOT_ONLY

CREATOR = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from sparring.sandbox.base import SandboxSpec
    from sparring.sandbox.local.backend import LocalBackend

    b = LocalBackend(root=Path(sys.argv[1]))
    print("ready", flush=True)
    sys.stdin.readline()
    asyncio.run(b.create(SandboxSpec(memory_mb=128, pids=64)))
    print("created", flush=True)
    """
)


def _cgroups(sandbox_id: str) -> list[Path]:
    cg = Path("/sys/fs/cgroup")
    return [*cg.glob(f"sparring/{sandbox_id}"), *cg.glob(f"*/sparring/{sandbox_id}")]


def _leftovers(root: Path) -> list[str]:
    home = reaper.sandbox_home(root)
    out = []
    for d in home.glob("sb-*"):
        out.append(f"dir {d}")
        out += [f"cgroup {c}" for c in _cgroups(d.name.removeprefix("sb-"))]
    out += [f"mount {m}" for m in mounts.mounts_below(home)]
    return out


def _crash_creating(root: Path, point: str, stop_watchdog: bool) -> Path:
    """Run a backend in a child, SIGKILLed at ``point`` of its first create; the sandbox dir it left.

    With ``stop_watchdog`` its watchdog is SIGSTOPped first (and left stopped: the caller resumes it),
    so what the test's own reap finds is exactly what the crash left."""
    env = {**os.environ, ENV: point, "PYTHONPATH": os.pathsep.join(sys.path)}
    child = subprocess.Popen(
        [sys.executable, "-c", CREATOR, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert child.stdin is not None and child.stdout is not None
    try:
        assert child.stdout.readline().strip() == "ready"
        if stop_watchdog:
            watchdog = int((root / f"watchdog-{child.pid}").read_text())
            os.kill(watchdog, signal.SIGSTOP)
            (root.parent / "stopped-watchdogs").open("a").write(
                f"{watchdog}\n"
            )  # outside root: reaps keep it
        child.stdin.write("go\n")
        child.stdin.flush()
        assert child.wait(timeout=120) == -signal.SIGKILL, f"the child was not killed at {point}"
        assert child.stdout.read() == "", "create finished: the crash point was never reached"
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    dirs = list(reaper.sandbox_home(root).glob("sb-*"))
    assert len(dirs) == 1, dirs
    assert reaper.id_owner(dirs[0].name) == child.pid  # owned by its name from the mkdir on
    return dirs[0]


def _resume_watchdog(root: Path) -> None:
    """End the watchdogs this test stopped: resumed, their owner long dead, they would only reap what the
    test already reaped; stopped, they would outlive the test (the reap deletes their marks in ``root``)."""
    stopped = root.parent / "stopped-watchdogs"
    for line in stopped.read_text().split() if stopped.exists() else []:
        with contextlib.suppress(OSError, ValueError):
            os.kill(int(line), signal.SIGKILL)


@pytest.mark.parametrize("point", ["sandbox-dir", "sandbox-mounted", "sandbox-cgroups"])
def test_an_owner_killed_mid_create_leaves_nothing_a_later_reap_keeps(tmp_path, point):
    root = tmp_path / "sbroot"
    try:
        d = _crash_creating(root, point, stop_watchdog=True)
        sid = d.name.removeprefix("sb-")
        # Positive control: the crash left exactly what that point has made, and no owner file says whose.
        assert d.is_dir() and (d / "owner").exists() == (point == "sandbox-cgroups")
        assert bool(mounts.mounts_below(d)) == (point != "sandbox-dir")
        assert len(_cgroups(sid)) == (3 if point == "sandbox-cgroups" else 0)  # memory, pids, freezer
        assert not (d / "cgroups").exists()  # the cgroups are listed nowhere: found by their name
        # A young directory: the old reaper skipped it as "being created", and never came back to it.
        assert reaper.reap(root) == 1
        assert _leftovers(root) == [] and _cgroups(sid) == []
    finally:
        _resume_watchdog(root)


def test_the_dead_owners_own_watchdog_reaps_a_half_made_sandbox(tmp_path):
    """No later backend needed: the watchdog of the killed owner finds the unowned-looking directory."""
    root = tmp_path / "sbroot"
    d = _crash_creating(root, "sandbox-cgroups", stop_watchdog=False)
    sid = d.name.removeprefix("sb-")
    assert wait_until(lambda: not d.exists() and not _cgroups(sid)), _leftovers(root)
    assert _leftovers(root) == []


def test_a_reaper_killed_mid_reap_leaves_what_the_next_reap_removes(tmp_path):
    """The owner file lives on the sandbox's tmpfs: a reaper killed after unmounting it (the old leftover:
    an empty, unowned directory) must leave a directory the next reap still attributes."""
    root = tmp_path / "sbroot"
    try:
        d = _crash_creating(root, "sandbox-cgroups", stop_watchdog=True)
        sid = d.name.removeprefix("sb-")
        reaping = subprocess.run(
            [sys.executable, "-c", "import sys; from pathlib import Path; from sparring.sandbox.isolation import reaper; "
             "reaper.reap(Path(sys.argv[1]))", str(root)],
            env={**os.environ, ENV: "reap-unmounted", "PYTHONPATH": os.pathsep.join(sys.path)},
            timeout=120,
        )  # fmt: skip
        assert reaping.returncode == -signal.SIGKILL
        assert d.is_dir() and not (d / "owner").exists() and not mounts.mounts_below(d)  # half reaped
        assert reaper.reap(root) == 1
        assert _leftovers(root) == [] and _cgroups(sid) == []
    finally:
        _resume_watchdog(root)
