"""Sparring installs and imports on every Python it declares (3.11 to 3.13), extras included.

On the running interpreter (the project's venv, 3.11 here) every module is imported. With Python
3.13 (Debian 13's or Ubuntu's ``python3``, found as ``python3.13`` or a pyenv one), a fresh venv gets
the package and every extra of pyproject.toml (read now, so extras added later are covered) that has
3.13 wheels here, then every module is imported. An extra that needs torch is not installed on 3.13
here: this workplace keeps only a cp311 CPU build of torch, and PyPI's default torch is the CUDA
build (gigabytes); such an extra must fail to resolve *because of torch* and nothing else, and the
modules that then do not import must fail only on the missing packages of those extras.

Which extras need torch is read from the project venv's installed metadata (each extra's requirements,
followed through the packages they require, with markers evaluated for 3.13); only those are resolved
one by one (each must fail on torch), and every other extra is installed in one pip run, which must
succeed. (One dry-run per extra, and pip compiling every installed file, were two thirds of the test's
CPU: 13 resolutions of 2-10 s each, and 40 s of byte-compiling that the imports redo for what they use.)
"""

from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NO_TORCH = "torch==0.0.0+unavailable\n"  # makes every extra that needs torch fail to resolve, visibly

IMPORT_ALL = r"""
import importlib, json, pkgutil, sys, traceback
import sparring
bad = {}
names = [m.name for m in pkgutil.walk_packages(sparring.__path__, "sparring.")]
for name in ["sparring", *names]:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as e:
        bad[name] = ["missing", (e.name or "").split(".")[0]]
    except Exception as e:
        bad[name] = ["error", f"{type(e).__name__}: {e}"]
print(json.dumps({"python": sys.version.split()[0], "modules": len(names) + 1, "failed": bad}))
"""


def extras() -> dict[str, list[str]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return dict(data["project"].get("optional-dependencies", {}))


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def requirement_names(reqs: list[str]) -> set[str]:
    from packaging.requirements import Requirement

    out = set()
    for r in reqs:
        req = Requirement(r)
        out.add(_norm(req.name))
        out |= {_norm(x) for x in req.extras}
    return out


def needs_torch(reqs: list[str], python: str = "3.13") -> bool:
    """Whether installing ``reqs`` pulls in torch: the requirements followed through the metadata of the
    packages installed in this venv (their extras' requirements too), markers evaluated for ``python``.
    A package this venv lacks is not followed (the install of the extras said not to need torch then
    fails on it, naming it)."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    env = {"python_version": python, "python_full_version": f"{python}.0"}

    def applies(r: Requirement, extras: frozenset[str] = frozenset()) -> bool:
        return r.marker is None or any(r.marker.evaluate({**env, "extra": e}) for e in ["", *extras])

    todo = [r for r in map(Requirement, reqs) if applies(r)]
    seen: set[tuple[str, frozenset[str]]] = set()
    while todo:
        req = todo.pop()
        key = (_norm(req.name), frozenset(map(_norm, req.extras)))
        if key in seen:
            continue
        seen.add(key)
        if key[0] == "torch":
            return True
        try:
            dist = md.distribution(req.name)
        except md.PackageNotFoundError:
            continue
        todo += [r for r in map(Requirement, dist.requires or []) if applies(r, key[1])]
    return False


def import_all(python: str, env: dict[str, str] | None = None) -> dict[str, object]:
    r = subprocess.run(
        [python, "-c", IMPORT_ALL], capture_output=True, text=True, env=env, timeout=600, cwd="/"
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def check_imports(result: dict[str, object], may_miss: set[str]) -> None:
    failed = result["failed"]
    assert isinstance(failed, dict) and int(result["modules"]) > 100  # type: ignore[call-overload]
    errors = {m: why for m, (kind, why) in failed.items() if kind == "error"}
    assert not errors, f"modules that raise on import under Python {result['python']}: {errors}"
    missing = {
        m: pkg for m, (kind, pkg) in failed.items() if kind == "missing" and _norm(pkg) not in may_miss
    }
    assert not missing, f"modules needing a package no extra declares (Python {result['python']}): {missing}"


def test_every_module_imports_on_this_interpreter():
    """The project's venv: what it lacks may only be packages of extras it did not install."""
    import importlib.metadata as md

    installed = {_norm(d.metadata["Name"]) for d in md.distributions()}
    may_miss = {n for reqs in extras().values() for n in requirement_names(reqs)} - installed
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    check_imports(import_all(sys.executable, env), may_miss)


def test_needs_torch_follows_requirements_through_installed_metadata():
    assert needs_torch(["torch>=2"]) and needs_torch(["accelerate"])  # directly, and one package down
    assert needs_torch(["trl>=0.20"])  # trl -> accelerate -> torch
    assert not needs_torch(["rich", "pydantic>=2"]) and not needs_torch([])
    assert not needs_torch(["accelerate; python_version < '3.0'"])  # a marker that excludes it


def find_python313() -> str | None:
    """A Python 3.13 that runs (a pyenv shim on PATH may name one it will not run)."""
    cands = [os.environ.get("SPARRING_PY313"), "/usr/bin/python3.13", shutil.which("python3.13"),
             *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.13*/bin/python3.13")), reverse=True)]  # fmt: skip
    for c in filter(None, cands):
        try:
            r = subprocess.run([c, "-c", "import sys; print(sys.version_info[:2] == (3, 13))"],
                               capture_output=True, text=True, timeout=30)  # fmt: skip
        except OSError:
            continue
        if r.stdout.strip() == "True":
            return c
    return None


@pytest.mark.slow
@pytest.mark.timeout(2400)  # its own steps are bounded (venv, install, extras: 120 + 600 + 900 s ...)
def test_installs_and_imports_on_python_313(tmp_path):
    py = find_python313()
    if py is None:
        pytest.skip("no Python 3.13 on this machine (set SPARRING_PY313 to one)")
    venv = tmp_path / "venv313"
    subprocess.run([py, "-m", "venv", str(venv)], check=True, timeout=120)
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / f, tree / f)
    cons = tmp_path / "no-torch.txt"
    cons.write_text(NO_TORCH)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # --no-compile: the imports below compile what they load; byte-compiling every installed file is not
    # what is tested here
    base = [*pip, "install", "-q", "--no-compile", "--only-binary=:all:", "-c", str(cons)]

    r = subprocess.run([*base, str(tree)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, f"the core package does not install on {py}: {r.stderr[-3000:]}"
    all_extras = extras()
    need_torch = [name for name, reqs in all_extras.items() if needs_torch(reqs)]
    ok = [name for name in all_extras if name not in need_torch]
    assert "dev" in ok and "train" in need_torch, (ok, need_torch)  # positive controls of the classification
    for name in need_torch:
        r = subprocess.run([*base, "--dry-run", f"{tree}[{name}]"], capture_output=True, text=True, env=env,
                           timeout=600)  # fmt: skip
        assert r.returncode != 0 and "torch" in r.stderr and "ResolutionImpossible" in r.stderr, (
            f"extra [{name}] needs torch (its requirements' metadata says so), so it must fail to resolve on "
            f"Python 3.13 because of torch, and only that: {r.stderr[-3000:] or 'it resolved'}"
        )
    r = subprocess.run(
        [*base, f"{tree}[{','.join(ok)}]"], capture_output=True, text=True, env=env, timeout=900
    )
    assert r.returncode == 0, f"extras {ok} (none needs torch) do not install on 3.13: {r.stderr[-3000:]}"
    installed = {n for e in ok for n in requirement_names(all_extras[e])}
    may_miss = {"torch"} | {n for e in need_torch for n in requirement_names(all_extras[e])} - installed
    result = import_all(str(venv / "bin" / "python"), env)
    assert str(result["python"]).startswith("3.13")
    check_imports(result, may_miss)
