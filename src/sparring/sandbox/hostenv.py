"""What of the host a host-path sandbox sees, as an identity: so a host upgrade is drift, not silence.

A task without an ``[environment] image`` runs on the host's own system: ``/usr`` and the loader's
files bound read-only (:mod:`sparring.sandbox.environment`), with its Python packages in a pinned
layer (:mod:`sparring.tasks.environment`, already part of what admission records). The rest, the
operating system's packages and the interpreter build, is described here by
:func:`host_environment`: the os-release name and version, ``sys.version``, and every installed
Debian package (``name:arch=version`` from dpkg's status file), hashed into one ``id``.

Admission records that id for host-path tasks; the gate (:mod:`sparring.admission.gate`) takes a
verdict made under another id as no verdict (the task is checked again), and ``tasks regress``
names the packages that changed, from the snapshot kept under the cache
(:func:`remember_snapshot`). Files that no package owns (``/usr/local``) are outside the id: a
task that depends on them should pin an image.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from sparring import atomicfile

DPKG_STATUS = "var/lib/dpkg/status"
OS_RELEASE = ("etc/os-release", "usr/lib/os-release")
MAX_STATUS_BYTES = 64 << 20
"""dpkg's status file is a few MB on a full desktop; past this it is not read (the id says so)."""


@dataclass(frozen=True)
class HostEnvironment:
    os: str
    """``ID VERSION_ID`` from os-release (``debian 12``), or ``unknown``."""
    python: str
    """The interpreter build (``sys.version``'s first word) of the host path's Python."""
    packages: tuple[str, ...]
    """Installed packages, sorted ``name:arch=version``; empty without dpkg."""
    package_source: str
    """``dpkg``, ``none`` (no status file) or ``too-large``."""

    @property
    def id(self) -> str:
        h = hashlib.sha256(f"host-env/1\n{self.os}\n{self.python}\n{self.package_source}\n".encode())
        for p in self.packages:
            h.update(p.encode() + b"\n")
        return "sha256:" + h.hexdigest()

    def summary(self) -> str:
        """One line for messages: ``debian 12, python 3.11.2, 931 packages``."""
        n = (
            f"{len(self.packages)} packages"
            if self.package_source == "dpkg"
            else f"packages: {self.package_source}"
        )
        return f"{self.os}, python {self.python}, {n}"

    def brief(self) -> dict[str, object]:
        """What an admission record keeps (the package list stays in the snapshot cache)."""
        return {"id": self.id, "os": self.os, "python": self.python, "packages": len(self.packages)}


def parse_os_release(text: str) -> str:
    """``ID VERSION_ID`` of an os-release file (quotes stripped); ``unknown`` when it names no ID."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in ("ID", "VERSION_ID"):
            fields[key.strip()] = value.strip().strip("'\"")
    if "ID" not in fields:
        return "unknown"
    return " ".join(v for v in (fields["ID"], fields.get("VERSION_ID", "")) if v)


def parse_dpkg_status(text: str) -> tuple[str, ...]:
    """Sorted ``name:arch=version`` of every package dpkg's status file says is installed.

    One linear pass over the stanzas (blank-line separated); continuation lines (a leading space)
    and fields other than Package, Architecture, Version and Status are skipped.
    """
    out: set[str] = set()
    fields: dict[str, str] = {}

    def flush() -> None:
        status = fields.get("Status", "").split()
        if fields.get("Package") and status[-1:] == ["installed"]:
            out.add(f"{fields['Package']}:{fields.get('Architecture', '')}={fields.get('Version', '')}")
        fields.clear()

    for line in text.splitlines():
        if not line.strip():
            flush()
        elif not line[0].isspace():
            key, sep, value = line.partition(":")
            if sep and key in ("Package", "Architecture", "Version", "Status"):
                fields[key] = value.strip()
    flush()
    return tuple(sorted(out))


def _read(path: Path, limit: int) -> str | None:
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError:
        return None
    return None if len(data) > limit else data.decode("utf-8", "replace")


def host_environment(root: Path = Path("/")) -> HostEnvironment:
    """The host system below ``root`` as a host-path sandbox sees it (``root`` other than ``/`` in tests)."""
    os_name = "unknown"
    for rel in OS_RELEASE:
        text = _read(root / rel, 1 << 16)
        if text is not None:
            os_name = parse_os_release(text)
            break
    status = root / DPKG_STATUS
    if not status.exists():
        packages: tuple[str, ...] = ()
        source = "none"
    else:
        text = _read(status, MAX_STATUS_BYTES)
        packages, source = (parse_dpkg_status(text), "dpkg") if text is not None else ((), "too-large")
    return HostEnvironment(os_name, sys.version.split()[0], packages, source)


def current_host_environment() -> HostEnvironment:
    """:func:`host_environment` of ``/``, parsed again only when dpkg's status file changes."""
    try:
        st = os.stat(Path("/") / DPKG_STATUS)
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
    except OSError:
        key = (0, 0, -1)
    return _host_environment_at(key)


@functools.lru_cache(maxsize=2)
def _host_environment_at(key: tuple[int, int, int]) -> HostEnvironment:
    return host_environment(Path("/"))


def snapshot_dir() -> Path:
    return Path(os.environ.get("SPARRING_HOSTENV_CACHE") or Path.home() / ".cache" / "sparring" / "hostenv")


def remember_snapshot(env: HostEnvironment) -> None:
    """Keep the package list under its id, so a later drift report can name what changed; best effort."""
    dest = snapshot_dir() / f"{env.id.removeprefix('sha256:')[:32]}.json"
    if dest.exists():
        return
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        snap = {**env.brief(), "package_source": env.package_source, "list": list(env.packages)}
        atomicfile.write_text(dest, json.dumps(snap), mode=0o600)
    except OSError:
        pass


def load_snapshot(env_id: str) -> HostEnvironment | None:
    try:
        raw = json.loads((snapshot_dir() / f"{env_id.removeprefix('sha256:')[:32]}.json").read_text())
        env = HostEnvironment(
            str(raw["os"]), str(raw["python"]), tuple(raw["list"]), str(raw["package_source"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return env if env.id == env_id else None


def describe_change(old: HostEnvironment, new: HostEnvironment, most: int = 8) -> list[str]:
    """Lines naming what moved between two host environments: os, python, and packages by name."""
    lines = []
    if old.os != new.os:
        lines.append(f"os {old.os} -> {new.os}")
    if old.python != new.python:
        lines.append(f"python {old.python} -> {new.python}")

    def by_name(pkgs: tuple[str, ...]) -> dict[str, str]:
        return dict(p.split("=", 1) for p in pkgs if "=" in p)

    a, b = by_name(old.packages), by_name(new.packages)
    moved = [
        f"{n} {a.get(n, '(none)')} -> {b.get(n, '(none)')}"
        for n in sorted(set(a) | set(b))
        if a.get(n) != b.get(n)
    ]
    lines += moved[:most]
    if len(moved) > most:
        lines.append(f"... and {len(moved) - most} more packages")
    return lines
