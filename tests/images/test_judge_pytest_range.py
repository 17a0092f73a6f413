"""The judge's in-sandbox code on both ends of the supported pytest range (docs/images.md: pytest 7-9):
the Debian test image (Python 3.13, its own pytest 8) with one more layer holding pytest 7.4 or 9.0
instead, and `judge score` giving the oracle 1.0 and the unfixed code 0 with that pytest."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import tomli_w
from image_support import DEBIAN_RECIPE, cache_dir, debian_layout, entry, layered_layout, tar_bytes

from sparring.images.archive import import_archive
from sparring.images.store import ImageStore
from sparring.tasks.loader import write_task
from sparring.tasks.spec import JudgeSpec, TaskSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="image roots are bound by the host: overlay mode (root)"),
]
SPARRING = [str(Path(sys.executable).parent / "sparring")]
SITE = "usr/local/lib/python3.13/dist-packages/"  # before Debian's /usr/lib/python3/dist-packages on sys.path
WHEELS = {7: ["pytest==7.4.4"], 9: ["pytest==9.0.3", "pygments==2.21.0"]}  # pytest 9 needs pygments
HIDDEN = """\
import pytest
from answer import answer


def test_answer():
    assert answer() == 42


def test_runs_the_pytest_of_the_layer():
    assert pytest.__version__.split(".")[0] == "{major}"
"""


def _wheels(pins: list[str]) -> list[Path]:
    """The wheels of ``pins``, downloaded once (pip, no dependencies: the image has the rest) and cached."""
    d = cache_dir() / "wheels"
    d.mkdir(exist_ok=True)
    out = []
    for pin in pins:
        name, version = pin.split("==")
        found = sorted(d.glob(f"{name}-{version}-*.whl"))
        if not found:
            r = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(d), pin],
                               capture_output=True, text=True, timeout=300)  # fmt: skip
            if r.returncode != 0:
                pytest.fail(f"pip download {pin} failed: {r.stderr.strip()[-300:]}")
            found = sorted(d.glob(f"{name}-{version}-*.whl"))
        out += found[:1]
    return out


def _pytest_layer(pins: list[str]) -> bytes:
    """A layer installing the wheels of ``pins`` under SITE, Debian's own pytest whited out."""
    entries: list = [
        entry("usr/lib/python3/dist-packages/.wh.pytest"),
        entry("usr/lib/python3/dist-packages/.wh._pytest"),
    ]
    dirs = set()
    for whl in _wheels(pins):
        with zipfile.ZipFile(whl) as z:
            for name in sorted(z.namelist()):
                if name.endswith("/"):
                    continue
                parts = (SITE + name).split("/")
                for i in range(1, len(parts)):
                    dirs.add("/".join(parts[:i]) + "/")
                entries.append(entry(SITE + name, data=z.read(name)))
    return tar_bytes([entry(d, tarfile.DIRTYPE) for d in sorted(dirs)] + entries)


@pytest.mark.parametrize("major", sorted(WHEELS))
def test_the_judge_runs_on_this_end_of_the_pytest_range(tmp_path, major):
    store = ImageStore(tmp_path / "images")
    layout = layered_layout(debian_layout(DEBIAN_RECIPE), _pytest_layer(WHEELS[major]), tmp_path / "layout")
    rec = import_archive(store, layout, tag=f"sparring-test/debian-pytest{major}:1")
    spec = TaskSpec(
        id="image-answer", family="code-repair", instruction="The function answer in answer.py returns the wrong number: make it return 42.",
        success_criteria="The hidden tests pass.",
        judge=JudgeSpec(hidden_tests=["test_hidden.py::test_answer", "test_hidden.py::test_runs_the_pytest_of_the_layer"]),
    )  # fmt: skip
    task = write_task(
        tmp_path / "task", spec, workspace={"answer.py": "def answer():\n    return 41\n"},
        hidden={"test_hidden.py": HIDDEN.replace("{major}", str(major))},
        solution={"answer.py": "def answer():\n    return 42\n"},
    )  # fmt: skip
    raw = tomllib.loads((task.path / "task.toml").read_text())
    raw.setdefault("environment", {})["image"] = f"sparring-test/debian-pytest{major}:1@{rec.digest}"
    (task.path / "task.toml").write_text(tomli_w.dumps(raw))
    env = {**os.environ, "SPARRING_IMAGE_ROOT": str(store.root)}
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace, ws)
    scores = []
    for text in ("def answer():\n    return 41\n", "def answer():\n    return 42\n"):
        (ws / "answer.py").write_text(text)
        r = subprocess.run([*SPARRING, "judge", "score", "--task", str(task.path), "--workspace", str(ws), "--json"],
                           capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        scores.append(json.loads(r.stdout))
    unfixed, fixed = scores
    assert fixed["reward"] == 1.0 and fixed["tests"]["passed"] == 2, fixed  # the layer's pytest ran them
    assert unfixed["reward"] == 0.0 and unfixed["tests"]["passed"] == 1, unfixed
