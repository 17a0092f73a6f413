"""Pinned task environments: an interpreter plus pinned requirements as a read-only layer.

A task's ``[environment]`` (python version, requirements) resolves to exact
distributions: each requirement ``name==version`` (a bare name takes the
installed version) plus its dependency closure, each at the version installed
next to Sparring. The layer is a virtual environment (no pip, no system site
packages) holding exactly those distributions' files, built once into
``$SPARRING_ENV_CACHE`` (default ``~/.cache/sparring/envs``) under its content
digest, made read-only and reused by every sandbox of that environment
(:class:`sparring.sandbox.environment.SandboxEnvironment` binds it read-only).

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
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from packaging.markers import default_environment
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from sparring.errors import TaskError
from sparring.judge.base import Judge
from sparring.sandbox.environment import SandboxEnvironment
from sparring.tasks.spec import Environment

if TYPE_CHECKING:
    from sparring.sandbox.local import LocalBackend

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

    def sandbox_environment(self) -> SandboxEnvironment:
        base = Path(sys.base_prefix).resolve()
        ro = tuple(p for p in (base, self.path) if not str(p).startswith("/usr"))
        return SandboxEnvironment(
            ro_paths=ro,
            path_dirs=(str(self.path / "bin"), "/usr/local/bin", "/usr/bin", "/bin"),
            python=str(self.python),
        )

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


class Judges:
    """One judge per pinned environment, each over its own sandbox backend, made on first use."""

    def __init__(self, cache: Path | None = None) -> None:
        self.cache = cache
        self._layers: dict[tuple[str, tuple[str, ...]], EnvironmentLayer] = {}
        self._judges: dict[tuple[str, str], Judge] = {}
        self._backends: dict[str, LocalBackend] = {}

    def layer_for(self, env: Environment) -> EnvironmentLayer:
        key = (env.python, tuple(env.requirements))
        if key not in self._layers:
            self._layers[key] = build_layer(env, self.cache)
        return self._layers[key]

    def judge_for(self, env: Environment, split: Literal["train", "eval"] = "train") -> Judge:
        """The pytest judge of ``env``'s layer; ``split="eval"`` runs hidden/eval/ (same backend)."""
        from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
        from sparring.sandbox.local import LocalBackend

        layer = self.layer_for(env)
        if layer.digest not in self._backends:
            self._backends[layer.digest] = LocalBackend(environment=layer.sandbox_environment())
        key = (layer.digest, split)
        if key not in self._judges:
            self._judges[key] = PytestJudge(self._backends[layer.digest], config=JudgeConfig(split=split))
        return self._judges[key]


class TaskEnvironmentBackend:
    """A sandbox backend that runs each task's sandboxes in the task's own pinned environment layer.

    Rollouts, evaluation and training create agent sandboxes and judge sandboxes from a task's
    workspace (``SandboxSpec.workspace`` is ``<task>/workspace``). This backend reads the task's
    ``[environment]`` from the ``task.toml`` next to that workspace, builds (or finds) its layer, and
    hands the spec to one :class:`~sparring.sandbox.local.LocalBackend` per layer digest, so the agent
    runs the interpreter and pinned packages the judge and admission use, and nothing of Sparring's own
    virtual environment (the generators' unmutated code included) is reachable from its sandbox.
    Layers and backends are made on first use and cached: after the first sandbox of an environment,
    picking the backend costs one ``stat`` and a dict lookup. A spec with no task next to its workspace
    (``sparring sandbox run``, an empty workspace) goes to a backend over Sparring's own interpreter.
    """

    name = "local"

    def __init__(self, root: Path | None = None, cache: Path | None = None) -> None:
        from sparring.sandbox.local import LocalBackend

        self.root = root
        self.cache = cache
        self.default = LocalBackend(root=root)
        self._layers: dict[tuple[str, tuple[str, ...]], EnvironmentLayer] = {}
        self._backends: dict[str, LocalBackend] = {}
        self._by_task: dict[tuple[str, int], LocalBackend] = {}

    def layer_for(self, env: Environment) -> EnvironmentLayer:
        key = (env.python, tuple(env.requirements))
        if key not in self._layers:
            self._layers[key] = build_layer(env, self.cache)
        return self._layers[key]

    def _key(self, spec: Any) -> tuple[str, int] | None:
        """(task.toml, its mtime) of the task owning ``spec.workspace``; None for a spec of no task."""
        ws = getattr(spec, "workspace", None)
        if ws is None:
            return None
        toml = Path(ws).parent / "task.toml"
        try:
            return (str(toml), toml.stat().st_mtime_ns)
        except OSError:
            return None

    def _layer_of(self, key: tuple[str, int]) -> EnvironmentLayer:
        from sparring.errors import SandboxError

        toml = Path(key[0])
        try:
            raw = tomllib.loads(toml.read_text())
            return self.layer_for(Environment.model_validate(raw.get("environment") or {}))
        except (TaskError, OSError, tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as e:
            raise SandboxError(f"task environment of {toml.parent}: {str(e).splitlines()[0]}") from None

    def _backend_of(self, key: tuple[str, int], layer: EnvironmentLayer) -> Any:
        from sparring.sandbox.local import LocalBackend

        backend = self._backends.get(layer.digest)
        if backend is None:
            backend = LocalBackend(root=self.root, environment=layer.sandbox_environment())
            self._backends[layer.digest] = backend
        self._by_task[key] = backend
        return backend

    def backend_for(self, spec: Any) -> Any:
        """The backend of the environment of the task that owns ``spec.workspace`` (the default without one)."""
        key = self._key(spec)
        if key is None:
            return self.default
        found = self._by_task.get(key)
        return found if found is not None else self._backend_of(key, self._layer_of(key))

    async def create(self, spec: Any, snapshot: str | None = None) -> Any:
        key = self._key(spec)
        backend: Any
        if key is None:
            backend = self.default
        elif (backend := self._by_task.get(key)) is None:
            # First sandbox of this task: building a new layer copies files, so not on the event loop.
            layer = await asyncio.to_thread(self._layer_of, key)
            backend = self._by_task.get(key) or self._backend_of(key, layer)
        return await backend.create(spec, snapshot=snapshot)

    def __getattr__(self, name: str) -> Any:  # mode, layers, snapshots...: the default backend's
        if name == "default":
            raise AttributeError(name)
        return getattr(self.default, name)
