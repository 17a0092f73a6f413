"""Map a task's Dockerfile onto what Sparring runs: the host's system plus a pinned Python layer.

Docker cannot run here, so a Dockerfile is read, never built. What maps:

``FROM``               any base (recorded; the host's system and Python stand in for it)
``WORKDIR``            the directory that becomes /workspace (the last one)
``COPY`` / ``ADD``     local files of the build context into the work directory: the workspace
``RUN apt-get ...``    ``update`` / ``install`` of packages this host already has (dpkg says
                       "install ok installed"); the list clean-up after it
``RUN pip install``    pinned packages (``name==version``): the environment's requirements,
                       which must be installed next to Sparring to build its layer
``RUN mkdir -p``       directories under the work directory
``CMD`` ``ENTRYPOINT`` ``LABEL`` ``ARG`` ``SHELL``  nothing to do

Anything else (``ENV``, ``USER``, ``EXPOSE``, a ``RUN`` of another command, a ``COPY --from``,
an ``ADD`` of a URL, a package the host lacks) is refused with a one-line error naming the
directive and its line.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from sparring.errors import TaskError
from sparring.tasks import taskfs

IGNORED = frozenset({"CMD", "ENTRYPOINT", "LABEL", "ARG", "SHELL", "MAINTAINER"})
PIP_FLAGS_WITH_VALUE = frozenset({"-i", "--index-url", "--extra-index-url", "-f", "--find-links", "-c",
                                  "--constraint", "--target", "--prefix", "--root"})  # fmt: skip
"""pip options that take a value; those that change where packages come from or go are refused below."""
PIP_OK_FLAGS = frozenset({"--no-cache-dir", "-q", "--quiet", "-U", "--upgrade", "--break-system-packages",
                          "--no-deps", "--system", "--root-user-action=ignore", "--disable-pip-version-check"})  # fmt: skip
APT_OK_FLAGS = frozenset({"-y", "-yq", "-qq", "-q", "--yes", "--no-install-recommends", "--quiet"})


@dataclass
class Mapped:
    """What a Dockerfile maps to: copies into the workspace, pinned pip requirements, the base image."""

    base: str = ""
    workdir: str = "/"
    copies: list[tuple[str, str]] = field(default_factory=list)
    """(source relative to the build context, destination relative to the work directory)."""
    requirements: list[str] = field(default_factory=list)
    apt: list[str] = field(default_factory=list)


def instructions(text: str) -> list[tuple[int, str, str]]:
    """(line, DIRECTIVE, arguments) of each instruction: continuations joined, comments dropped."""
    out: list[tuple[int, str, str]] = []
    buf, start = "", 0
    for n, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not buf and (not s or s.startswith("#")):
            continue
        if buf and s.startswith("#"):
            continue
        if not buf:
            start = n
        if s.endswith("\\"):
            buf += s[:-1] + " "
            continue
        buf += s
        word, _, rest = buf.partition(" ")
        out.append((start, word.upper(), rest.strip()))
        buf = ""
    if buf:
        word, _, rest = buf.partition(" ")
        out.append((start, word.upper(), rest.strip()))
    return out


def host_has_package(name: str) -> bool:
    """dpkg says the package is installed on this host."""
    try:
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", name], capture_output=True, text=True,
                           timeout=30, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return False
    return r.returncode == 0 and r.stdout.strip() == "install ok installed"


def _commands(run: str) -> list[list[str]]:
    """A RUN line's shell commands (split on ``&&``, ``;``), each as words; a pipe or redirect is refused."""
    if run.startswith("["):
        raise TaskError("RUN in exec form ([...]) is not supported")
    try:
        words = shlex.split(run, posix=True)
    except ValueError as e:
        raise TaskError(f"RUN does not parse as shell words ({e})") from None
    out: list[list[str]] = [[]]
    for w in words:
        if w in ("&&", ";"):
            out.append([])
        elif w in ("|", "||", ">", ">>", "<") or w.startswith((">", "<")):
            raise TaskError(f"RUN with {w!r} is not supported")
        else:
            out[-1].append(w)
    return [c for c in out if c]


def _pip(args: list[str], where: str) -> list[str]:
    reqs: list[str] = []
    skip = False
    for a in args:
        if skip:
            skip = False
            continue
        if a.startswith("-"):
            if a in PIP_FLAGS_WITH_VALUE or a.split("=", 1)[0] in PIP_FLAGS_WITH_VALUE:
                raise TaskError(f"{where}: pip option {a} is not supported (packages come from this machine)")
            if a in ("-r", "--requirement", "-e", "--editable"):
                raise TaskError(f"{where}: pip {a} is not supported: list pinned packages (name==version)")
            if a not in PIP_OK_FLAGS:
                raise TaskError(f"{where}: pip option {a} is not supported")
            continue
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9,._-]+\])?==[A-Za-z0-9.+!_-]+", a):
            raise TaskError(f"{where}: pip package {a!r} is not pinned (name==version)")
        reqs.append(a)
    return reqs


def _run(run: str, where: str, m: Mapped) -> None:
    for cmd in _commands(run):
        prog, args = cmd[0], cmd[1:]
        if prog in ("apt-get", "apt") and args[:1] == ["update"]:
            continue
        if prog in ("apt-get", "apt") and args[:1] == ["install"]:
            for a in args[1:]:
                if a.startswith("-"):
                    if a not in APT_OK_FLAGS:
                        raise TaskError(f"{where}: apt-get option {a} is not supported")
                    continue
                name = a.split("=", 1)[0]
                if not host_has_package(name):
                    raise TaskError(f"{where}: apt package {name} is not installed on this host (install it "
                                    "here, or drop it from the Dockerfile)")  # fmt: skip
                m.apt.append(name)
            continue
        if prog == "rm" and args and all(a in ("-rf", "-fr", "-r", "-f") or a.startswith("/var/lib/apt/lists")
                                         for a in args):  # fmt: skip
            continue
        if prog in ("apt-get", "apt") and args[:1] == ["clean"]:
            continue
        pip_args = None
        if prog in ("pip", "pip3") and args[:1] == ["install"]:
            pip_args = args[1:]
        elif prog.startswith("python") and args[:3] == ["-m", "pip", "install"]:
            pip_args = args[3:]
        elif prog == "uv" and args[:2] == ["pip", "install"]:
            pip_args = args[2:]
        if pip_args is not None:
            m.requirements += _pip(pip_args, where)
            continue
        if prog == "mkdir":
            dirs = [a for a in args if not a.startswith("-")]
            if all(_under(m.workdir, d) is not None for d in dirs):
                continue
        raise TaskError(f"{where}: RUN {shlex.join(cmd)[:80]} is not supported (only apt-get install of packages "
                        "this host has, pip install of pinned packages and mkdir in the work directory map)")  # fmt: skip


def _under(workdir: str, dest: str) -> str | None:
    """``dest`` (absolute, or relative to ``workdir``) relative to ``workdir``; None if outside it."""
    p = PurePosixPath(dest if dest.startswith("/") else f"{workdir.rstrip('/')}/{dest}")
    w = PurePosixPath(workdir)
    try:
        rel = p.relative_to(w)
    except ValueError:
        return None
    return None if ".." in rel.parts else rel.as_posix()


def map_dockerfile(path: Path) -> Mapped:
    """The Dockerfile as workspace copies and requirements; TaskError naming an unsupported directive."""
    m = Mapped()
    steps = instructions(path.read_text())
    workdirs = [args for _, d, args in steps if d == "WORKDIR"]
    final = workdirs[-1] if workdirs else "/"
    if not final.startswith("/"):
        raise TaskError(f"{path.name}: WORKDIR {final} is not absolute")
    m.workdir = final
    for line, directive, args in steps:
        where = f"{path.name} line {line}"
        if directive == "FROM":
            m.base = args.split()[0] if args else ""
        elif directive == "WORKDIR" or directive in IGNORED:
            continue
        elif directive in ("COPY", "ADD"):
            words = shlex.split(args)
            flags = [w for w in words if w.startswith("--")]
            bad = [f for f in flags if not f.startswith(("--chown", "--chmod"))]
            if bad:
                raise TaskError(f"{where}: {directive} {bad[0]} is not supported")
            paths = [w for w in words if not w.startswith("--")]
            if len(paths) < 2:
                raise TaskError(f"{where}: {directive} needs a source and a destination")
            dest = _under(m.workdir, paths[-1])
            if dest is None:
                raise TaskError(f"{where}: {directive} to {paths[-1]}, outside the work directory {m.workdir}, "
                                "is not supported (only the work directory becomes the workspace)")  # fmt: skip
            for src in paths[:-1]:
                if "://" in src or (
                    directive == "ADD" and src.endswith((".tar", ".gz", ".tgz", ".xz", ".bz2"))
                ):
                    raise TaskError(f"{where}: ADD {src} (a URL or an archive to unpack) is not supported")
                # A destination ending in / (or the work directory itself) is a directory: keep that mark.
                m.copies.append((src, dest + "/" if dest and paths[-1].endswith("/") else dest))
        elif directive == "RUN":
            _run(args, where, m)
        else:
            raise TaskError(f"{where}: {directive} is not supported (Sparring maps FROM, WORKDIR, COPY/ADD of local "
                            "files, RUN apt-get install / pip install / mkdir)")  # fmt: skip
    return m


def workspace_files(m: Mapped, context: Path, private: frozenset[str] = frozenset()) -> dict[str, bytes]:
    """The files the COPY/ADD steps put in the work directory (relative to it), read from ``context``.

    ``private`` names top-level entries of the context the agent must never see (the tests, the
    solution): a directory copy leaves them out, a copy naming one is an error."""
    out: dict[str, bytes] = {}
    ctx = context.resolve()
    for src, dest in m.copies:
        p = (context / src).resolve()
        if not p.is_relative_to(ctx) or not p.exists():
            raise TaskError(f"COPY source {src} is not a file of the build context {context}")
        if p != ctx and p.relative_to(ctx).parts[0] in private:
            raise TaskError(f"COPY {src} would put the task's tests or solution in the agent's workspace")
        if p.is_file():
            data = taskfs.read_file(ctx, p.relative_to(ctx).as_posix())  # resolved: no link on the way
            if data is None:
                raise TaskError(f"COPY source {src} is not a regular file of the build context {context}")
            out[f"{dest}{p.name}" if dest.endswith("/") or not dest else dest] = data
            continue
        top = p.relative_to(ctx).parts[0] if p != ctx else None
        for r, data in sorted(taskfs.files(p).items()):  # regular files only: no link is read through
            if (top or r.split("/", 1)[0]) not in private:
                out[f"{dest.rstrip('/')}/{r}" if dest.rstrip("/") else r] = data
    return out
