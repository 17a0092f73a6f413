"""Whether a process is alive: the one test the reaper and the image store share for an owner pid."""

from __future__ import annotations

import os
from pathlib import Path


def pid_alive(pid: int) -> bool:
    """``pid`` runs. A zombie does not: an owner SIGKILLed whose parent has not waited for it yet (a Ray
    worker under a busy raylet) still answers ``kill(pid, 0)``, and what it owned would never be reclaimed."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True  # no /proc: kill(pid, 0) is all there is
    state = stat.rpartition(b")")[2].split()[:1]
    return state not in ([b"Z"], [b"X"])
