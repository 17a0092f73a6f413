"""Host-side file operations on a sandbox's workspace, for every backend that mounts it on the host.

Reads, writes, deletes and listings under /workspace go straight to the
merged view on the host, each path walked with O_NOFOLLOW beneath the
workspace root, so a symlink the agent planted cannot redirect them; paths
outside /workspace go through the sandbox itself.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import TYPE_CHECKING

from sparring.errors import SandboxError
from sparring.sandbox.base import WORKSPACE, ExecResult
from sparring.sandbox.isolation import mounts

READ_CAP = 16 << 20  # the most one read_file carries into host memory


def _shown(name: str) -> str:
    """A listed name as valid text: bytes that are not UTF-8 show as ``\\xNN`` escapes (a name
    decoded with surrogates could not be written to JSON, and would break the trajectory record)."""
    return os.fsencode(name).decode("utf-8", "backslashreplace")


class HostFiles:
    """read_file / write_file / delete_file / list_dir for a sandbox whose merged workspace is ``self.ws``."""

    ws: Path
    id: str
    closed: bool
    files_owner: int | None = (
        None  # uid (= gid) that files the host creates belong to (the agent's host user)
    )

    if TYPE_CHECKING:

        async def exec(
            self,
            cmd: list[str] | str,
            timeout: float = 30.0,
            env: dict[str, str] | None = None,
            cwd: str = WORKSPACE,
            stdin: bytes | None = None,
        ) -> ExecResult: ...

    def _rel(self, path: str) -> str | None:
        if not path.startswith("/"):
            return path
        if path == WORKSPACE or path.startswith(WORKSPACE + "/"):
            return path[len(WORKSPACE) :].lstrip("/")
        return None

    def _check_open(self) -> None:
        if self.closed:
            raise SandboxError(f"sandbox {self.id} is closed")

    async def read_file(self, path: str) -> bytes:
        self._check_open()
        rel = self._rel(path)
        if rel is None:
            r = await self.exec(["cat", "--", path], timeout=10)
            if r.exit_code != 0:
                raise FileNotFoundError(2, r.stderr.strip() or "cannot read", path)
            return r.stdout.encode()
        fd = mounts.open_beneath(self.ws, rel, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            size = os.fstat(fd).st_size  # apparent size: a sparse file counts in full
            if size > READ_CAP:
                raise OSError(
                    errno.EFBIG,
                    f"{path} has {size} bytes, more than the {READ_CAP >> 20} MiB the host reads at once; "
                    "read parts of it with bash (head, sed -n)",
                )
            return f.read(READ_CAP + 1)[:READ_CAP]

    async def write_file(self, path: str, content: bytes) -> None:
        self._check_open()
        rel = self._rel(path)
        if rel is None:
            raise SandboxError(f"can only write under {WORKSPACE}: {path}")
        try:
            fd = mounts.open_beneath(
                self.ws, rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, make_parents=True,
                owner=self.files_owner,
            )  # fmt: skip
            with os.fdopen(fd, "wb") as f:
                f.write(content)
        except OSError as e:
            if e.errno == 28:  # ENOSPC: the disk quota
                raise OSError(28, "disk quota of the sandbox exceeded", path) from None
            raise

    async def delete_file(self, path: str) -> None:
        self._check_open()
        rel = self._rel(path)
        if rel is None:
            raise SandboxError(f"can only delete under {WORKSPACE}: {path}")
        parts = mounts.split_beneath(rel)
        if not parts:
            raise SandboxError("cannot delete the workspace itself")
        parent = "/".join(parts[:-1])
        fd = (
            mounts.open_beneath(self.ws, parent, os.O_RDONLY | os.O_DIRECTORY)
            if parent
            else os.open(self.ws, os.O_RDONLY | os.O_DIRECTORY)
        )
        try:
            os.unlink(parts[-1], dir_fd=fd)
        finally:
            os.close(fd)

    async def list_dir(self, path: str = WORKSPACE) -> list[str]:
        self._check_open()
        rel = self._rel(path)
        if rel is None:
            r = await self.exec(["ls", "-1A", "--", path], timeout=10)
            if r.exit_code != 0:
                raise FileNotFoundError(2, r.stderr.strip() or "cannot list", path)
            return r.stdout.split()
        fd = (
            mounts.open_beneath(self.ws, rel, os.O_RDONLY | os.O_DIRECTORY)
            if mounts.split_beneath(rel)
            else os.open(self.ws, os.O_RDONLY | os.O_DIRECTORY)
        )
        try:
            return sorted(
                _shown(e.name) + ("/" if e.is_dir(follow_symlinks=False) else "") for e in os.scandir(fd)
            )
        finally:
            os.close(fd)
