"""sparring.pids.pid_alive and the reaper's orphan test: a SIGKILLed owner whose parent has not waited for it yet is dead."""

from __future__ import annotations

import os
import signal
import time

from sparring.pids import pid_alive
from sparring.sandbox.isolation.reaper import orphaned
from tests_support import wait_until


def test_a_zombie_owner_is_dead_and_its_sandboxes_orphaned():
    pid = os.fork()
    if pid == 0:  # the child only waits to be killed (bounded)
        time.sleep(30)
        os._exit(0)
    try:
        assert pid_alive(pid) and not orphaned(pid)  # positive control: a running owner
        os.kill(pid, signal.SIGKILL)
        # Not waited for yet: a zombie, which kill(pid, 0) still finds.
        assert wait_until(lambda: not pid_alive(pid), timeout_s=30)
        os.kill(pid, 0)  # the pid still exists (the zombie)...
        assert orphaned(pid)  # ...but its sandboxes are orphans
    finally:
        os.waitpid(pid, 0)
    assert pid_alive(os.getpid())
