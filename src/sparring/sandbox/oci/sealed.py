"""Execute-only copies of the exec server's shell and of podman's init: their memory is not the commands'.

The kernel lets a process read and write the memory of another process of its uid through
``/proc/PID/mem`` (and ptrace, process_vm_*, which the profile denies) as long as the target is
*dumpable*. The exec server and the init run for the sandbox's whole life with the commands' uid, so
a command could patch their code and stay in the sandbox across every reset. A process that execs a
file it may not read is made non-dumpable by the kernel (``would_dump``: dumpable set to
``fs.suid_dumpable``, 0 or 2, neither of which another process of the uid may access), and a command
(uid 0 without ``CAP_DAC_OVERRIDE``) may not read a file owned by ``nobody`` with mode 0111. So the
server runs a copy of the host's static busybox ``sh`` and podman runs a copy of its catatonit
(``--init-path``), both owned by nobody, execute-only, bind-mounted read-only. Commands exec the
image's own (readable) programs and are ordinary dumpable processes.

Copies are made once per backend root, atomically, named by the content's digest.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from sparring import atomicfile
from sparring.errors import SandboxUnavailableError
from sparring.sandbox.isolation.features import INSTALL_HINT
from sparring.sandbox.oci.image import find_static_busybox
from sparring.sandbox.oci.support import NOBODY

CATATONIT = ("/usr/libexec/podman/catatonit", "/usr/bin/catatonit", "/usr/local/libexec/podman/catatonit")
SEALED_MODE = 0o111


def find_catatonit() -> Path:
    for cand in (*CATATONIT, shutil.which("catatonit")):
        if cand and Path(cand).is_file():
            return Path(cand).resolve()
    raise SandboxUnavailableError(f"no catatonit (podman's init) found: {INSTALL_HINT}")


def seal(root: Path, src: Path, name: str) -> Path:
    """``root/sealed-DIGEST/name``: a copy of ``src`` owned by nobody, execute-only (made if missing)."""
    data = src.read_bytes()
    d = root / f"sealed-{hashlib.sha256(data).hexdigest()[:16]}"
    path = d / name
    if path.is_file() and os.stat(path).st_mode & 0o7777 == SEALED_MODE:
        return path
    d.mkdir(mode=0o755, exist_ok=True)
    with atomicfile.replacing(path, mode=SEALED_MODE) as tmp:
        tmp.write_bytes(data)
        os.chown(tmp, NOBODY, NOBODY)
    return path


def sealed_binaries(root: Path) -> tuple[Path, Path]:
    """The execute-only ``sh`` (static busybox) and ``catatonit`` under ``root``."""
    return seal(root, find_static_busybox(), "sh"), seal(root, find_catatonit(), "catatonit")
