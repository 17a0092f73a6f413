"""A fault-injection seam: SIGKILL this process at a named point of a multi-step host operation.

Making a sandbox (a directory, mounts, cgroups) or reaping one takes several
system calls; a process can die between any two of them. Tests prove that
whatever a death at each point leaves is found and removed by the reaper, and
they need to die exactly *there*, not after a guessed sleep:
``SPARRING_CRASH_AT=<point>`` makes :func:`crash_point` with that name SIGKILL
the calling process (nothing runs after it: no finally, no atexit, as with a
real SIGKILL). Unset, it costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

ENV = "SPARRING_CRASH_AT"


def crash_point(name: str) -> None:
    """Die here, by SIGKILL, when ``$SPARRING_CRASH_AT`` names this point."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
