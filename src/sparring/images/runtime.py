"""What a flattened image root needs before a sandbox can use it as its ``/``.

The root is shared, read-only, by every sandbox of the image, so nothing can be created in it per
sandbox: the mount points the local backend binds onto (/workspace, /tmp, $HOME, /proc, /dev, the
exec server's file, the judge's directories) are made here, once, and so are the few files a sandbox
needs of its own (an ``agent`` user with uid 1000 beside the image's users, the hostname, hosts).
A component that the image made a symlink or a file (``/tmp -> /var/tmp``) is replaced by a real
directory, and a file is always replaced, never written in place: the root's files are hard links to
the unpacked layers, which must never change.

:class:`ImageConfig` carries what of the image's config a sandbox applies: ``Env`` and ``WorkingDir``.
"""

from __future__ import annotations

import contextlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from sparring.images.unpack import _DIR, remove_at

MOUNT_POINTS = (
    "proc", "dev", "tmp", "workspace", "home/agent", ".sparring", "run/sparring",
    "judge/hidden", "judge/cfg", "judge/out",
)  # fmt: skip
SERVER_FILE = ".sparring/execserver"
AGENT_PASSWD = "agent:x:1000:1000:agent:/home/agent:/bin/sh\n"
AGENT_GROUP = "agent:x:1000:\n"
HOSTS = "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost\n"
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
BIN_DIR = "/.sparring/bin"  # last on a sandbox's PATH: `python` where the image has only python3


@dataclass(frozen=True)
class ImageConfig:
    """The parts of an image's config a sandbox applies."""

    env: dict[str, str]
    working_dir: str
    user: str = ""

    @classmethod
    def from_config(cls, cfg: dict[str, object]) -> ImageConfig:
        c = cfg.get("config") or {}
        assert isinstance(c, dict)
        env: dict[str, str] = {}
        for item in c.get("Env") or []:
            k, sep, v = str(item).partition("=")
            if sep and k:
                env[k] = v
        return cls(env=env, working_dir=str(c.get("WorkingDir") or ""), user=str(c.get("User") or ""))

    @property
    def path(self) -> str:
        return self.env.get("PATH") or DEFAULT_PATH


def _dir_at(root_fd: int, rel: str) -> int:
    """An fd of directory ``rel`` under the root, made (and any non-directory on the way replaced)."""
    fd = os.dup(root_fd)
    for comp in rel.split("/"):
        st = None
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(comp, dir_fd=fd, follow_symlinks=False)
        if st is not None and not stat.S_ISDIR(st.st_mode):
            remove_at(fd, comp)
            st = None
        if st is None:
            os.mkdir(comp, 0o755, dir_fd=fd)
        nfd = os.open(comp, _DIR, dir_fd=fd)
        os.close(fd)
        fd = nfd
    return fd


def _read_at(dir_fd: int, name: str) -> str:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return ""  # missing, or a symlink: never followed
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        with open(fd, "rb", closefd=False) as f:
            return f.read(1 << 20).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _replace_at(dir_fd: int, name: str, text: str, mode: int = 0o644) -> None:
    remove_at(dir_fd, name)
    fd = os.open(
        name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd
    )
    try:
        os.write(fd, text.encode())
        os.fchmod(fd, mode)
    finally:
        os.close(fd)


def _with_line(text: str, line: str, uid_field: int) -> str:
    """``text`` (passwd or group) with ``line`` added unless its id (or its name) is taken already."""
    name, want = line.split(":")[0], line.split(":")[uid_field]
    for row in text.splitlines():
        f = row.split(":")
        if len(f) > uid_field and (f[0] == name or f[uid_field] == want):
            return text
    if text and not text.endswith("\n"):
        text += "\n"
    return text + line


def python_alias(root: Path, path: str) -> str | None:
    """The image's ``python3`` when its PATH has no ``python`` (Debian's images): what the judge's
    ``python`` command finds, through /.sparring/bin at the end of PATH."""
    dirs = [d for d in path.split(":") if d.startswith("/")]
    if any(os.path.lexists(root / d.lstrip("/") / "python") for d in dirs):
        return None
    return next((f"{d}/python3" for d in dirs if os.path.lexists(root / d.lstrip("/") / "python3")), None)


def prepare(root: Path, path: str = DEFAULT_PATH) -> None:
    """Make ``root`` (a flattened image whose config's PATH is ``path``) usable as a sandbox's ``/``."""
    alias = python_alias(root, path)
    rfd = os.open(root, _DIR)
    try:
        if alias is not None:
            bfd = _dir_at(rfd, BIN_DIR.lstrip("/"))
            try:
                remove_at(bfd, "python")
                os.symlink(alias, "python", dir_fd=bfd)
            finally:
                os.close(bfd)
        for rel in MOUNT_POINTS:
            os.close(_dir_at(rfd, rel))
        for rel, mode in (("tmp", 0o1777), ("home/agent", 0o755), ("workspace", 0o755)):
            fd = _dir_at(rfd, rel)
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)
        sfd = _dir_at(rfd, ".sparring")
        try:
            _replace_at(sfd, "execserver", "", 0o755)
        finally:
            os.close(sfd)
        efd = _dir_at(rfd, "etc")
        try:
            passwd = _read_at(efd, "passwd") or "root:x:0:0:root:/root:/bin/sh\n"
            group = _read_at(efd, "group") or "root:x:0:\n"
            _replace_at(efd, "passwd", _with_line(passwd, AGENT_PASSWD, 2))
            _replace_at(efd, "group", _with_line(group, AGENT_GROUP, 2))
            _replace_at(efd, "hostname", "sandbox\n")
            _replace_at(efd, "hosts", HOSTS)
        finally:
            os.close(efd)
    finally:
        os.close(rfd)
