"""The wheel a user installs works on its own: built with ``python -m build`` (sdist, then the wheel
from the sdist), it carries the exec server's C source and the judge's golden data, and installed
into a fresh venv (no source tree on the path) it runs ``sparring doctor`` and one ``sandbox exec``
whose exec server is compiled from the wheel's own C source.

Where this workplace's local package index exists (/opt/pypi), it is the only index used (with the
wheels in /opt/wheels): the test needs no network.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL_INDEXES = [p for p in (Path("/opt/pypi/simple"), Path("/opt/pypi-more/simple")) if p.is_dir()]
PACKAGE_DATA = (
    "sparring/sandbox/local/execserver.c",
    "sparring/judge/quality/golden.json",
    "sparring/py.typed",
)

pytestmark = pytest.mark.slow


def pip_env() -> dict[str, str]:
    """The environment for pip and build: the local index only, where there is one."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    if LOCAL_INDEXES:
        env["PIP_INDEX_URL"] = LOCAL_INDEXES[0].as_uri()
        env["PIP_EXTRA_INDEX_URL"] = " ".join(p.as_uri() for p in LOCAL_INDEXES[1:])
    if Path("/opt/wheels").is_dir():
        env["PIP_FIND_LINKS"] = "/opt/wheels"
    return env


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("wheel")
    src = work / "src-tree"
    src.mkdir()
    shutil.copytree(ROOT / "src", src / "src", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / f, src / f)
    dist = work / "dist"
    r = subprocess.run([sys.executable, "-m", "build", "--outdir", str(dist), str(src)],
                       capture_output=True, text=True, env=pip_env(), timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    (wheel,) = dist.glob("sparring-*.whl")
    (sdist,) = dist.glob("sparring-*.tar.gz")
    return {"work": work, "wheel": wheel, "sdist": sdist}


def test_sdist_and_wheel_carry_the_package_data(built):
    names = set(zipfile.ZipFile(built["wheel"]).namelist())
    assert all(p in names for p in PACKAGE_DATA), sorted(n for n in names if not n.endswith(".py"))
    with tarfile.open(built["sdist"]) as t:
        snames = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert all(f"src/{p}" in snames for p in PACKAGE_DATA)
    # Every file of the source package is in the wheel (a data file outside package-data would be lost).
    src_files = {
        str(p.relative_to(ROOT / "src"))
        for p in (ROOT / "src" / "sparring").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    assert src_files <= names, sorted(src_files - names)


def test_the_installed_wheel_runs_doctor_and_a_sandbox(built):
    work = built["work"]
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    r = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(built["wheel"])],
                       capture_output=True, text=True, env=pip_env(), timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["SPARRING_SANDBOX_ROOT"] = str(
        work / "sandboxes"
    )  # a fresh root: the C server is built from the wheel
    sparring = str(venv / "bin" / "sparring")

    r = subprocess.run(
        [sparring, "doctor", "--json"], capture_output=True, text=True, env=env, cwd=work, timeout=300
    )
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    by = {c["name"]: c for c in rep["checks"]}
    assert rep["schema"] == "sparring.doctor/1" and by["bubblewrap"]["status"] == "ok"
    assert by["exec server"]["status"] == "ok"  # the wheel's execserver.c compiles here

    ws = work / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("from-the-workspace\n")
    r = subprocess.run(
        [sparring, "sandbox", "exec", "--workspace", str(ws), "--", "sh", "-c",
         "echo written > /workspace/f; cat /workspace/f /workspace/a.txt"],
        capture_output=True, text=True, env=env, cwd=work, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("written\nfrom-the-workspace\n"), r.stdout
    assert (ws / "a.txt").read_text() == "from-the-workspace\n" and not (ws / "f").exists()  # contained
    assert any(p.name.startswith("execserver-") and not p.suffix for p in (work / "sandboxes").iterdir())
