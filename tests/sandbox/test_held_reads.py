"""What a reset reads again and again is read through descriptors opened once (init_state.ProcFiles,
CgroupSet.hold): the same content as a read by path, fresh on every read, and bound to the process it
was opened for."""

from __future__ import annotations

import asyncio
import os
import resource
import subprocess
import sys

import pytest

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.isolation.cgroups import cgroup_procs
from sparring.sandbox.isolation.init_state import InitState, ProcFiles
from sparring.sandbox.local.backend import LocalBackend
from tests_support import ROOT_ONLY


def test_proc_files_read_what_a_read_by_path_reads_and_see_each_change():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        files = ProcFiles(child.pid)
        try:
            born = files.read()
            assert born == InitState.read(child.pid)
            # changes after the descriptors were opened, each seen through them
            os.setpriority(os.PRIO_PROCESS, child.pid, 7)
            resource.prlimit(child.pid, resource.RLIMIT_NOFILE, (123, 123))
            with open(f"/proc/{child.pid}/oom_score_adj", "w") as f:
                f.write("500")
            later = files.read()
            assert later.nice == 7 and born.nice != 7

            def nofile(limits: str) -> list[str]:
                return next(ln for ln in limits.splitlines() if ln.startswith("Max open files")).split()[3:5]

            assert nofile(later.rlimits) == ["123", "123"] != nofile(born.rlimits)
            assert later.oom_score_adj == "500"
            why = born.drift(files, "exec server")
            assert "nice" in why and "rlimits" in why and "oom_score_adj" in why
        finally:
            files.close()
    finally:
        child.kill()
        child.wait()


def test_proc_files_of_a_process_that_is_gone_cannot_be_read():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    files = ProcFiles(child.pid)
    try:
        born = files.read()  # positive control: readable while it lives
        child.wait()  # exited and reaped: its pid may now be anyone's
        with pytest.raises(SandboxError, match="cannot be read"):
            files.read()
        assert "cannot be read" in born.drift(files, "exec server")
    finally:
        files.close()


def test_proc_files_refuse_a_pid_that_does_not_exist():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    with pytest.raises(SandboxError, match="cannot be read"):
        ProcFiles(child.pid)


@ROOT_ONLY
def test_held_cgroup_lists_show_the_sandbox_processes_as_the_path_does():
    async def body():
        backend = LocalBackend(prefork=0)
        sb = await backend.create(SandboxSpec(memory_mb=128, pids=64))
        try:
            assert sb.cg.dirs and bool(sb.cg._procs_fds) == sb.cg.v2  # held on v2 only (cgroups.py)
            before = sb.cg.pids()
            await sb.exec("sleep 30 >/dev/null 2>&1 &")
            during = sb.cg.pids()
            by_path = sorted({p for d in sb.cg.dirs.values() for p in cgroup_procs(d)})
            await sb.reset()
            after = sb.cg.pids()
            return before, during, by_path, after
        finally:
            await sb.close()
            await backend.aclose()

    before, during, by_path, after = asyncio.run(body())
    assert during == by_path  # the same list as a read by path, read again (not the one of create)
    assert len(during) == len(before) + 1  # the background sleep joined
    assert after == before  # reset killed it, and the held list shows that
