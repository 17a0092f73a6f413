"""Pinned task environments: an interpreter plus pinned requirements as a read-only layer.

A task's ``[environment]`` (python version, requirements) resolves to exact
distributions: each requirement ``name==version`` (a bare name takes the
installed version) plus its dependency closure, each at the version installed
next to Sparring. The layer is a virtual environment (no pip, no system site
packages) holding exactly those distributions' files, built once into
``$SPARRING_ENV_CACHE`` (default ``~/.cache/sparring/envs``) under its content
digest, made read-only and reused by every sandbox of that environment: a
sandbox spec names it (``SandboxSpec.environment``, see
:func:`sparring.tasks.sandbox_spec.spec_for_task`) and the backend binds it read-only.
This module only resolves and builds layers; :func:`layer_for` memoizes them per
process and :func:`alayer_for` builds a new one off the event loop.

Sparring itself is never in the layer, so nothing an agent can read in its
sandbox holds the generators' original code (code-repair's unmutated bases).
Building needs no network: files come from the installed distributions'
RECORDs. A pin that this machine cannot satisfy is a TaskError naming it.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from sparring.errors import TaskError
from sparring.sandbox.base import EnvironmentRef
from sparring.tasks.spec import Environment

LAYER_FORMAT = "sparring-env-layer/1"


def cache_root() -> Path:
    return Path(os.environ.get("SPARRING_ENV_CACHE") or Path.home() / ".cache" / "sparring" / "envs")


def _dist(name: str) -> md.Distribution:
    try:
        return md.distribution(name)
    except md.PackageNotFoundError:
        raise TaskError(
            f"environment requirement {name!r} is not installed for {sys.executable}: install it"
        ) from None


def _deps(dist: md.Distribution) -> list[str]:
    marker_env: dict[str, str] = {k: str(v) for k, v in default_environment().items()} | {"extra": ""}
    out = []
    for raw in dist.requires or []:
        req = Requirement(raw)
        if req.marker is None or req.marker.evaluate(marker_env):
            out.append(req.name)
    return out


def resolve(env: Environment) -> tuple[str, ...]:
    """The environment's exact distributions as sorted ``name==version`` pins (dependency closure included)."""
    want = f"{sys.version_info.major}.{sys.version_info.minor}"
    if env.python != want:
        raise TaskError(f"environment wants python {env.python}, but this machine builds layers with {want}")
    pins: dict[str, str] = {}
    todo: list[tuple[str, str | None]] = []
    for raw in env.requirements:
        try:
            req = Requirement(raw)
        except InvalidRequirement as e:
            raise TaskError(f"environment requirement {raw!r} is invalid: {e}") from None
        exact = [s.version for s in req.specifier if s.operator in ("==", "===")]
        todo.append((req.name, exact[0] if exact else None))
    while todo:
        name, version = todo.pop()
        key = str(canonicalize_name(name))
        dist = _dist(name)
        if version is not None and dist.version != version:
            raise TaskError(
                f"environment pins {name}=={version} but {dist.version} is installed: install {name}=={version} "
                "or regenerate the task"
            )
        if key in pins:
            continue
        pins[key] = dist.version
        todo += [(d, None) for d in _deps(dist)]
    return tuple(f"{k}=={v}" for k, v in sorted(pins.items()))


def pinned_requirements(names: tuple[str, ...] = ("pytest",)) -> list[str]:
    """Exact pins (with the dependency closure) of the installed versions: what generators write."""
    return list(_pinned(names))


@functools.lru_cache(maxsize=16)
def _pinned(names: tuple[str, ...]) -> tuple[str, ...]:
    return resolve(Environment(requirements=list(names)))


@dataclass(frozen=True)
class EnvironmentLayer:
    """A built layer: its content digest, its directory and the pins it holds."""

    digest: str
    path: Path
    pins: tuple[str, ...]

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    def ref(self) -> EnvironmentRef:
        """What a :class:`~sparring.sandbox.base.SandboxSpec` carries so a backend mounts this layer."""
        return EnvironmentRef(digest=self.digest, path=self.path)

    @functools.cached_property
    def file_hashes(self) -> frozenset[str]:
        """sha256 of every file in the layer (admission looks for solution files among them)."""
        out = set()
        for p in self.path.rglob("*"):
            if p.is_file() and not p.is_symlink():
                out.add(hashlib.sha256(p.read_bytes()).hexdigest())
        return frozenset(out)


def layer_digest(pins: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    h.update(f"{LAYER_FORMAT}\n{sys.version}\n{sys.platform}\n".encode())
    for p in pins:
        h.update(p.encode() + b"\n")
    return "sha256:" + h.hexdigest()


def _site_packages(root: Path) -> Path:
    return root / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"


def _copy_dist(name: str, dest_site: Path) -> int:
    dist = _dist(name)
    files = dist.files or []
    n = 0
    for f in files:
        rel = Path(str(f))
        if rel.parts and rel.parts[0] == "..":
            continue  # console scripts and data outside site-packages: the layer runs `python -m`
        src = Path(str(dist.locate_file(f)))
        if not src.is_file():
            continue
        dst = dest_site / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)
        n += 1
    if n == 0:
        raise TaskError(
            f"environment requirement {name!r}: its installed files could not be found (no RECORD?)"
        )
    return n


def _read_only(root: Path) -> None:
    for dirpath, _dirs, filenames in os.walk(root):
        for f in filenames:
            p = Path(dirpath) / f
            if not p.is_symlink():
                p.chmod(p.stat().st_mode & ~0o222)
    for dirpath, dirnames, _ in os.walk(root, topdown=False):
        for d in dirnames:
            p = Path(dirpath) / d
            p.chmod(p.stat().st_mode & ~0o222)


def build_layer(env: Environment, cache: Path | None = None) -> EnvironmentLayer:
    """The environment's layer, built on first use and cached by digest (safe against concurrent builders)."""
    pins = resolve(env)
    digest = layer_digest(pins)
    root = Path(cache or cache_root())
    final = root / digest.split(":", 1)[1][:24]
    if (final / "manifest.json").is_file():
        return EnvironmentLayer(digest, final, pins)
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=root))
    try:
        tmp.chmod(0o755)  # mkdtemp's 0700 would keep the sandbox's agent user out
        base_python = (
            Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        )
        subprocess.run(
            [
                str(base_python if base_python.exists() else sys.executable),
                "-m",
                "venv",
                "--without-pip",
                str(tmp),
            ],
            check=True,
            capture_output=True,
        )
        site = _site_packages(tmp)
        counts = {pin: _copy_dist(pin.split("==")[0], site) for pin in pins}
        manifest = {
            "format": LAYER_FORMAT,
            "digest": digest,
            "python": sys.version,
            "pins": list(pins),
            "files": counts,
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        for script in (tmp / "bin").iterdir():  # activate scripts name the build dir; the layer needs none
            if script.name.startswith("activate") or script.name.startswith("Activate"):
                script.unlink()
        _read_only(tmp)
        try:
            tmp.rename(final)
        except OSError:
            if not (final / "manifest.json").is_file():
                raise
            _discard(tmp)  # another builder won the race; its layer is the same bytes
    except subprocess.CalledProcessError as e:
        _discard(tmp)
        raise TaskError(
            f"could not create the environment layer: {e.stderr.decode(errors='replace')[-200:]}"
        ) from None
    except BaseException:
        _discard(tmp)
        raise
    return EnvironmentLayer(digest, final, pins)


def _discard(p: Path) -> None:
    if p.exists():
        for dirpath, dirnames, _ in os.walk(p):
            for d in [dirpath, *(os.path.join(dirpath, x) for x in dirnames)]:
                os.chmod(d, 0o755)
        shutil.rmtree(p, ignore_errors=True)


def describe(layer: EnvironmentLayer) -> dict[str, object]:
    return {"digest": layer.digest, "path": str(layer.path), "pins": list(layer.pins)}


_LAYERS: dict[tuple[str, tuple[str, ...], str], EnvironmentLayer] = {}


def layer_for(env: Environment, cache: Path | None = None) -> EnvironmentLayer:
    """``env``'s layer, built (:func:`build_layer`) once per process: later calls are a dict lookup."""
    key = (env.python, tuple(env.requirements), str(cache or cache_root()))
    found = _LAYERS.get(key)
    if found is None:
        found = _LAYERS[key] = build_layer(env, cache)
    return found


async def alayer_for(env: Environment, cache: Path | None = None) -> EnvironmentLayer:
    """:func:`layer_for` for the event loop: a layer not yet known is resolved and built in a thread."""
    key = (env.python, tuple(env.requirements), str(cache or cache_root()))
    found = _LAYERS.get(key)
    return found if found is not None else await asyncio.to_thread(layer_for, env, cache)
