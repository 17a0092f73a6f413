"""The ledger service's worker: runs INSIDE a sandbox as ``app/worker.py``; holds the worker lock while alive."""

import contextlib
import os
import signal
import sys
import time

LOCK = sys.argv[1]
with open(LOCK, "w") as f:
    f.write(f"{os.getpid()}\n")


def bye(*_):
    with contextlib.suppress(OSError):
        os.unlink(LOCK)
    sys.exit(0)


signal.signal(signal.SIGTERM, bye)
while True:
    time.sleep(1)
