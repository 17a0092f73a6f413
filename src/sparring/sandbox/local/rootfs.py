"""The root filesystem of a local sandbox: a small host directory made the sandbox's ``/``.

Each sandbox gets ``<sb>/root``, a directory with the mount points, a
synthetic /etc and the exec server, turned into its own *shared* mount. The
sandbox's bubblewrap binds it as ``/`` (read-only), so the mounts the host
makes under it later (the workspace overlay, /tmp and the home directory,
all on the sandbox's size-limited tmpfs) propagate into the running sandbox.
That is what makes ``reset`` and ``restore`` a few mount calls instead of a
new container. What never changes (/usr, the interpreter, the venv) is bound
read-only by bubblewrap once, at start.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sparring import atomicfile
from sparring.errors import ConfigError
from sparring.sandbox.environment import GROUP, HOST_ETC, HOSTNAME, PASSWD, TOP_LEVEL, SandboxEnvironment
from sparring.sandbox.isolation.features import c_compiler

HOME = "/home/agent"
SERVER = "/.sparring/execserver"
HOSTS = "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost ip6-localhost\n"
STATIC_SUFFIX = "-static"  # a C exec server linked statically: it runs in an image's root too
WRITABLE = ("/tmp", HOME)  # on the sandbox's tmpfs: they count against its disk quota and reset with it


def under_writable(p: Path) -> bool:
    s = str(p)
    return any(s == w or s.startswith(w + "/") for w in WRITABLE)


@dataclass(frozen=True)
class RootPlan:
    """What every sandbox root of one backend holds; computed once per backend.

    ``ro_binds`` (host path, path inside) are mounted read-only *by the host*
    (as root) under the sandbox root before bubblewrap starts, so bubblewrap
    itself can run as the unprivileged agent user without access to them on
    the host (a venv under /root, a judge's 0700 temporary directory).
    """

    dirs: tuple[str, ...]
    symlinks: tuple[tuple[str, str], ...]
    files: tuple[tuple[str, str], ...]
    ro_binds: tuple[tuple[Path, str], ...]
    late_binds: tuple[Path, ...]  # environment paths under /tmp or $HOME: bound by the host after each mount

    @classmethod
    def build(cls, env: SandboxEnvironment) -> RootPlan:
        dirs = ["usr", "proc", "dev", "tmp", "workspace", "home/agent", "etc", ".sparring", "run/sparring"]
        dirs += ["judge/hidden", "judge/cfg", "judge/out"]
        symlinks: list[tuple[str, str]] = []
        binds: list[tuple[Path, str]] = [(Path("/usr"), "/usr")]
        for name in TOP_LEVEL:
            p = Path("/") / name
            if p.is_symlink():
                symlinks.append((name, os.readlink(p)))
            elif p.is_dir():
                dirs.append(name)
                binds.append((p, f"/{name}"))
        files = [
            ("etc/passwd", PASSWD),
            ("etc/group", GROUP),
            ("etc/hostname", HOSTNAME + "\n"),
            ("etc/hosts", HOSTS),
        ]
        files.append((SERVER.lstrip("/"), ""))
        for etc in HOST_ETC:
            p = Path(etc)
            if p.is_dir():
                dirs.append(etc.lstrip("/"))
            elif p.exists():
                files.append((etc.lstrip("/"), ""))
            else:
                continue
            binds.append((p, etc))
        late: list[Path] = []
        for p in env.ro_paths:
            if under_writable(p):
                late.append(p)
                continue
            dirs.append(str(p).lstrip("/"))
            binds.append((p, str(p)))
        # parents before children, and no duplicates
        dirs = sorted(set(dirs), key=lambda d: (d.count("/"), d))
        return cls(tuple(dirs), tuple(symlinks), tuple(files), tuple(binds), tuple(late))

    @classmethod
    def for_image(cls) -> RootPlan:
        """An image's root brings everything itself (its mount points made when it was unpacked,
        sparring.images.runtime): nothing to make or bind per sandbox."""
        return cls((), (), (), (), ())

    def bwrap_ro_binds(self) -> list[str]:
        """The same binds as bubblewrap arguments (copy mode, where the host cannot mount)."""
        out: list[str] = []
        for src, dest in self.ro_binds:
            out += ["--ro-bind", str(src), dest]
        return out

    def populate(self, root: Path) -> None:
        """Create the skeleton under ``root`` (a new, empty directory)."""
        for d in self.dirs:
            os.makedirs(root / d, mode=0o755, exist_ok=True)
        for name, target in self.symlinks:
            os.symlink(target, root / name)
        for rel, text in self.files:
            with open(root / rel, "w") as f:
                f.write(text)
            os.chmod(root / rel, 0o644)


def install_server(root: Path, kind: str = "auto") -> tuple[str, Path]:
    """The exec server every sandbox of a backend runs, cached in the backend root by content.

    ``c``: execserver.c compiled with the host's C compiler (starts in ~1 ms);
    ``python``: execserver.py run by the environment's interpreter (~10 ms);
    ``auto``: C when a compiler works, else Python (logged once).
    """
    if kind not in ("auto", "c", "python"):
        raise ConfigError(f"exec server must be 'auto', 'c' or 'python', not {kind!r}")
    here = Path(__file__).parent
    if kind in ("auto", "c"):
        src = (here / "execserver.c").read_bytes()
        base = root / f"execserver-{hashlib.sha256(src).hexdigest()[:12]}"
        static = base.with_name(base.name + STATIC_SUFFIX)
        if static.exists():
            return "c", static
        cc = c_compiler()
        if cc is not None:
            # Static first: it then needs nothing from the sandbox's root, so it runs in any image's
            # (another libc, or none); dynamic where no static libc is installed.
            for flags, dst in ((["-static"], static), ([], base)):
                if dst.exists():
                    return "c", dst
                why = _compile(cc, flags, here / "execserver.c", dst)
                if not why:
                    return "c", dst
        else:
            why = "no C compiler (cc) on PATH"
        if kind == "c":
            raise ConfigError(f"cannot build the C exec server: {why}; install gcc or use the Python one")
        logging.getLogger("sparring.sandbox").warning(
            "using the Python exec server (sandbox start ~10 ms slower): %s", why
        )
    src = (here / "execserver.py").read_bytes()
    dst = root / f"execserver-{hashlib.sha256(src).hexdigest()[:12]}.py"
    if not dst.exists():
        atomicfile.write_bytes(dst, src, mode=0o644)
    return "python", dst


class _NotBuilt(Exception):
    """The compiler failed; its last line of complaint."""


def _compile(cc: str, flags: list[str], source: Path, dst: Path) -> str:
    """Build ``dst`` (0755, in place only when the compiler succeeded); "" when built, else the
    compiler's last line of complaint."""
    try:
        with atomicfile.replacing(dst, mode=0o755) as tmp:
            r = subprocess.run(
                [cc, "-O2", *flags, "-o", str(tmp), str(source)], capture_output=True, text=True
            )
            if r.returncode != 0:
                raise _NotBuilt((r.stderr.strip().splitlines() or ["no output"])[-1])
    except _NotBuilt as e:
        return str(e)
    return ""
