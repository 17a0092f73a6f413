"""A task whose [environment] names an image, on the local backend: `tasks pin` pins its tag to the
digest, `tasks check` admits it, and the judge runs the hidden tests with the image's own interpreter
and pytest (Debian trixie: Python 3.13; the host has 3.11), so the oracle scores 1.0 only there, and
the unfixed workspace 0. The same pinned task on the OCI backend (the image in podman's storage under
the same digest) is judged the same way: the same digest is the same environment (issue 34)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from image_support import DEBIAN_RECIPE, debian_layout, podman_image

from sparring.errors import SandboxUnavailableError
from sparring.images.archive import import_archive
from sparring.images.store import ImageStore
from sparring.judge.pytest_judge import PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.sandbox.oci.backend import OCIBackend
from sparring.tasks.loader import Task, write_task
from sparring.tasks.spec import Environment, JudgeSpec, TaskSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="image roots are bound by the host: overlay mode (root)"),
]
PYTEST_RECIPE = DEBIAN_RECIPE  # one Debian image for every image test: built once, cached
SPARRING = [str(Path(sys.executable).parent / "sparring")]
HIDDEN = """\
import sys
from answer import answer


def test_answer():
    assert answer() == 42


def test_runs_on_the_image_interpreter():
    assert sys.version_info[:2] == (3, 13)
    with open("/etc/os-release") as f:
        assert "trixie" in f.read()
"""


def _task(root: Path, image: str) -> Task:
    spec = TaskSpec(
        id="image-answer", family="code-repair", instruction="The function answer in answer.py returns the wrong number: make it return 42.",
        success_criteria="The hidden tests pass.", environment=Environment(image=image),
        judge=JudgeSpec(hidden_tests=["test_hidden.py::test_answer", "test_hidden.py::test_runs_on_the_image_interpreter"]),
    )  # fmt: skip
    return write_task(
        root, spec, workspace={"answer.py": "def answer():\n    return 41\n"},
        hidden={"test_hidden.py": HIDDEN}, solution={"answer.py": "def answer():\n    return 42\n"},
    )  # fmt: skip


def test_hidden_tests_run_with_the_image_interpreter(tmp_path):
    assert sys.version_info[:2] != (3, 13)  # control: the host's interpreter would fail the second test
    store = ImageStore(tmp_path / "images")
    rec = import_archive(store, debian_layout(PYTEST_RECIPE), tag="sparring-test/debian-pytest:1")
    task = _task(tmp_path / "task", "sparring-test/debian-pytest:1")
    env = {**os.environ, "SPARRING_IMAGE_ROOT": str(store.root)}
    r = subprocess.run(
        [*SPARRING, "tasks", "pin", str(task.path), "--json"], capture_output=True, text=True, env=env
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["tasks"][0]["image"] == f"sparring-test/debian-pytest:1@{rec.digest}"
    r = subprocess.run([*SPARRING, "tasks", "check", str(task.path), "--json", "--repeats", "2"],
                       capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    checked = json.loads(r.stdout)["tasks"][0]
    assert r.returncode == 0 and checked["ok"], checked
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
    assert fixed["reward"] == 1.0 and fixed["tests"]["passed"] == 2, fixed
    assert unfixed["reward"] == 0.0 and unfixed["tests"]["passed"] == 1, unfixed


def test_the_oci_backend_judges_with_the_image_interpreter_too(tmp_path):
    """The task pinned to the image's digest in Sparring's store; the same image in podman's storage
    (skopeo keeps the digest), judged by the OCI backend: the image's Python 3.13, not the host's layer."""
    assert sys.version_info[:2] != (3, 13)  # control: the task's host-built layer would fail the second test
    rec = import_archive(
        ImageStore(tmp_path / "images"), debian_layout(PYTEST_RECIPE), tag="sparring-test/debian-pytest:1"
    )
    task = _task(tmp_path / "task", f"sparring-test/debian-pytest:1@{rec.digest}")
    try:
        backend = OCIBackend(root=tmp_path / "oci")
    except SandboxUnavailableError as e:
        pytest.fail(f"the OCI backend is unavailable here: {e}")

    async def go() -> list:
        judge = PytestJudge(backend)
        return [await judge.score(task, WorkspaceDiff(files={"answer.py": f"def answer():\n    return {n}\n".encode()}))
                for n in (41, 42)]  # fmt: skip

    for _ in podman_image(debian_layout(PYTEST_RECIPE), "localhost/sparring-test/debian-pytest:1"):
        unfixed, fixed = asyncio.run(go())
    assert fixed.status == "ok" and fixed.reward == 1.0, (fixed.reason, fixed.log[-2000:])
    assert fixed.per_test == {
        "test_hidden.py::test_answer": "passed",
        "test_hidden.py::test_runs_on_the_image_interpreter": "passed",
    }
    assert unfixed.status == "ok" and unfixed.reward == 0.0, (unfixed.reason, unfixed.log[-2000:])
    assert unfixed.per_test["test_hidden.py::test_runs_on_the_image_interpreter"] == "passed", (
        unfixed.per_test
    )
