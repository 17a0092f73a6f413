"""Host-side pieces of the OCI backend: the exec server's and each command's script, cgroup chores, FIFO
collection. The two scripts are written by the host and run inside the container by its busybox.

The workspace of an OCI sandbox is an overlay mounted on the host, so file
operations under /workspace run on the host without entering the container,
never following a symlink the agent planted (``mounts.open_beneath``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
from collections.abc import Callable
from pathlib import Path

from sparring.sandbox.base import TRUNC_MARKER
from sparring.sandbox.isolation.cgroups import cgroup_procs, empty_and_remove, kill_members

HOSTNAME = "sandbox"
NOBODY = 65534
CGROUP_ROOT = Path("/sys/fs/cgroup")
CG_PREFIX = "sparring-oci-"
BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "USER": "root",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "TZ": "UTC",
    "HOSTNAME": HOSTNAME,
}

SERVER_SHELL = "/.sparring-bin/sh"  # the execute-only static busybox (sealed.py), bound read-only
SERVER_ARGV = f"{SERVER_SHELL}\0/.sparring/server.sh\0".encode()  # the server's command line in /proc
SERVER_SH = """cd /
run() {
  d=/.sparring/x/$1
  exec 3>"$d.ev"
  i=/dev/null; [ -e "$d.in" ] && i="$d.in"
  ( read -r p _ </proc/self/stat
    { echo "$p" >/.sparring-cg/x$1/cgroup.procs; } 2>/dev/null || { echo "sparring: cannot join the exec cgroup" >&2; exit 125; }
    exec 3>&-; . "$d.sh" ) <"$i" >"$d.out" 2>"$d.err" &
  wait $!
  echo "rc $?" >&3
}
while :; do
  while read -r n; do ( run "$n" & ); done < /.sparring/req
done
"""


def command_script(argv: list[str], env: dict[str, str], cwd: str) -> str:
    """One command's script (``<n>.sh``), run by the server's busybox: ``setsid`` and ``env`` are its
    applets, and a bare program name is looked up on the command's PATH here (busybox would prefer its
    own applet of that name to the image's program)."""
    q = shlex.quote
    dirs = " ".join(q(d) for d in env.get("PATH", "").split(":") if d)
    return "\n".join([
        f"cd -- {q(cwd)} 2>/dev/null || {{ echo {q(f'sparring: cannot chdir to {cwd}')} >&2; exit 125; }}",
        f"p={q(argv[0])}",
        f'case $p in */*) ;; *) for d in {dirs}; do [ -f "$d/$p" ] && [ -x "$d/$p" ] && {{ p="$d/$p"; break; }}; done;; esac',
        "exec setsid env -i " + " ".join(q(f"{k}={v}") for k, v in sorted(env.items())) + ' "$p" ' + " ".join(map(q, argv[1:])),
        "",
    ])  # fmt: skip


def cg_dirs(name: str) -> list[Path]:
    """Every directory called ``name`` directly under a cgroup hierarchy root (v1 and v2)."""
    out = [CGROUP_ROOT / name] if (CGROUP_ROOT / "cgroup.controllers").is_file() else []
    with contextlib.suppress(OSError):
        out += [h / name for h in CGROUP_ROOT.iterdir() if (h / name).is_dir()]
    return [p for p in out if p.is_dir()]


def kill_cgroup(d: Path, rounds: int = 50) -> None:
    """SIGKILL every process in cgroup ``d`` until it is empty (a fork race ends within the pids limit)."""
    kill_members([d], rounds=rounds, pause_s=0.002)


def kill_tree(d: Path) -> None:
    """Kill every process in cgroup ``d`` and in the cgroups a command made below it."""
    for dirpath, _, _ in os.walk(d):
        kill_cgroup(Path(dirpath))


def tree_empty(d: Path) -> bool:
    return all(not cgroup_procs(Path(dirpath)) for dirpath, _, _ in os.walk(d))


def remove_cgroups(sid: str, wait_s: float = 30.0) -> None:
    """Kill what is left in the sandbox's cgroups (conmon may still be exiting) and remove them, retrying
    while killed members finish exiting (:func:`sparring.sandbox.isolation.cgroups.empty_and_remove`)."""
    empty_and_remove(cg_dirs(CG_PREFIX + sid), wait_s=wait_s)


class Sink:
    """Collects one non-blocking FIFO on the event loop: keeps ``cap`` bytes, counts the rest, notes EOF."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, fd: int, cap: int, on_data: Callable[[], None] | None = None
    ) -> None:
        self.loop, self.fd, self.cap = loop, fd, cap
        self.buf = bytearray()
        self.dropped = 0
        self.eof: asyncio.Future[None] = loop.create_future()
        self.on_data = on_data
        loop.add_reader(fd, self._read)

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.close()
                return
            room = self.cap - len(self.buf)
            if room > 0:
                self.buf += chunk[:room]
            self.dropped += max(0, len(chunk) - max(room, 0))
            if self.on_data is not None:
                self.on_data()

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        if not self.eof.done():
            self.eof.set_result(None)

    def text(self) -> str:
        t = bytes(self.buf).decode("utf-8", errors="replace")
        return t + TRUNC_MARKER.format(n=self.dropped) if self.dropped else t
