"""The execution environment a sandbox sees: a read-only root and a Python layer.

The root filesystem is the host's /usr (read-only) plus a synthetic /etc; the
Python layer is an interpreter prefix and a virtual environment, bound
read-only at the same paths so their absolute paths keep working. The
environment's identity (paths and interpreter version) is hashed so a
trajectory can record which environment produced it.
"""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

AGENT_UID = 1000
AGENT_GID = 1000
# The host uid/gid the agent's uid 1000 maps to when the backend runs as root: a user that owns nothing.
AGENT_HOST_UID = int(os.environ.get("SPARRING_AGENT_HOST_UID", "100000"))
HOSTNAME = "sandbox"

PASSWD = "root:x:0:0:root:/root:/bin/sh\nagent:x:1000:1000:agent:/home/agent:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n"
GROUP = "root:x:0:\nagent:x:1000:\nnogroup:x:65534:\n"


@dataclass(frozen=True)
class SandboxEnvironment:
    """Read-only host paths bound into every sandbox, and the fixed environment variables."""

    ro_paths: tuple[Path, ...]
    path_dirs: tuple[str, ...]
    variables: dict[str, str] = field(default_factory=dict)
    python: str = ""
    """The interpreter that runs the sandbox's exec server (default: ``python3`` of the first PATH dir)."""

    @property
    def interpreter(self) -> str:
        if self.python:
            return self.python
        for d in self.path_dirs:
            if (Path(d) / "python3").exists():
                return str(Path(d) / "python3")
        return "/usr/bin/python3"

    @classmethod
    def current_python(cls) -> SandboxEnvironment:
        """The interpreter (and venv) running Sparring: it has pytest, which the judge needs."""
        prefixes: list[Path] = []
        for p in {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}:
            if not str(p).startswith("/usr"):
                prefixes.append(p)
        venv_bin = str(Path(sys.prefix) / "bin")
        return cls(
            ro_paths=tuple(sorted(prefixes)),
            path_dirs=(venv_bin, "/usr/local/bin", "/usr/bin", "/bin"),
            python=sys.executable,
        )

    @classmethod
    def of_layer(cls, layer: Path) -> SandboxEnvironment:
        """A built environment layer (a venv made from the host's base interpreter): the base
        interpreter's prefix and the layer bound read-only, the layer's bin first on PATH."""
        base = Path(sys.base_prefix).resolve()
        return cls(
            ro_paths=tuple(p for p in (base, Path(layer)) if not str(p).startswith("/usr")),
            path_dirs=(str(Path(layer) / "bin"), "/usr/local/bin", "/usr/bin", "/bin"),
            python=str(Path(layer) / "bin" / "python"),
        )

    @classmethod
    def of_image(cls, root: Path, image_env: dict[str, str]) -> SandboxEnvironment:
        """A container image's root: nothing bound from the host, the image's ``Env`` applied (its PATH
        searched inside ``root`` for the interpreter of the Python exec server). The sandbox keeps its
        own user, home, locale and hash seed: the image's HOME and USER would name a read-only place."""
        path = image_env.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        dirs = (*(d for d in path.split(":") if d.startswith("/")), "/.sparring/bin")
        keep = {
            k: v for k, v in image_env.items() if k not in ("PATH", "HOME", "USER", "LOGNAME", "HOSTNAME")
        }
        python = next(
            (
                f"{d}/{n}"
                for d in dirs
                for n in ("python3", "python")
                if os.path.lexists(root / d.lstrip("/") / n)
            ),
            "",
        )
        return cls(ro_paths=(), path_dirs=dirs, variables=keep, python=python or "/usr/bin/python3")

    def digest(self) -> str:
        h = hashlib.sha256()
        h.update(sys.version.encode())
        for p in self.ro_paths:
            h.update(str(p).encode())
        return "sha256:" + h.hexdigest()[:16]

    def base_env(self, seed: int) -> dict[str, str]:
        env = {
            "PATH": ":".join(self.path_dirs),
            "HOME": "/home/agent",
            "USER": "agent",
            "LOGNAME": "agent",
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TZ": "UTC",
            "PYTHONHASHSEED": str(seed),
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONUNBUFFERED": "1",
            "TERM": "dumb",
            # The judge pins its plugins; autoloading every installed plugin also costs seconds per run.
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
        }
        env.update(self.variables)
        return env


HOST_ETC = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/ssl",
    "/etc/libreoffice",
    "/etc/fonts",
)
"""Host configuration a sandbox reads (read-only): the loader's, TLS roots, and that of the system programs
task families run (LibreOffice's registry is a symlink into /etc/libreoffice; fontconfig reads /etc/fonts)."""
TOP_LEVEL = ("bin", "lib", "lib64", "sbin", "lib32", "libx32")


def host_usr_binds() -> list[str]:
    """bwrap arguments for a read-only /usr-based root (Debian's merged /usr)."""
    args = ["--ro-bind", "/usr", "/usr"]
    for name in TOP_LEVEL:
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), f"/{name}"]
        elif p.is_dir():
            args += ["--ro-bind", str(p), f"/{name}"]
    for etc in HOST_ETC:
        if Path(etc).exists():
            args += ["--ro-bind", etc, etc]
    return args
