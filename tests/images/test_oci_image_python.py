"""A task that names an image runs the image's Python on the OCI backend too (issue 34: the same digest is
the same environment): no host Python layer is bound, the commands get the image's ``Env`` and PATH with
/.sparring/bin last, and there a ``python`` to the image's ``python3`` (Debian trixie: Python 3.13; the host
has 3.11). The link is the host's, in a directory the commands cannot write. An image with no Python is
refused by ``tasks check``'s ``image_interpreter`` in one line, as on the local backend, never run on the
host's layer. The judge on such an image: tests/images/test_judge_in_image.py."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from image_support import DEBIAN_RECIPE, debian_layout, podman_image

from sparring.admission.image import check_image_interpreter
from sparring.errors import SandboxUnavailableError
from sparring.sandbox.oci.backend import OCIBackend
from sparring.tasks.loader import Task, write_task
from sparring.tasks.sandbox_spec import spec_for_task
from sparring.tasks.spec import Environment, JudgeSpec, TaskSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="the OCI backend needs root (its cgroups and mounts)"),
]
NAME = "localhost/sparring-test/oci-python:1"
VERSION = "python -c 'import sys; print(sys.version)'"


@pytest.fixture(scope="module")
def image() -> Iterator[str]:
    yield from podman_image(debian_layout(DEBIAN_RECIPE), NAME)


@pytest.fixture
def backend(tmp_path) -> OCIBackend:
    try:
        return OCIBackend(root=tmp_path / "oci")
    except SandboxUnavailableError as e:
        pytest.fail(f"the OCI backend is unavailable here: {e}")


def _task(root: Path, image: str) -> Task:
    spec = TaskSpec(
        id="oci-image-python", family="code-repair", instruction="Make answer() in answer.py return 42.",
        success_criteria="The hidden tests pass.", environment=Environment(image=image),
        judge=JudgeSpec(hidden_tests=["test_hidden.py::test_answer"]),
    )  # fmt: skip
    return write_task(
        root, spec, workspace={"answer.py": "def answer():\n    return 41\n"},
        hidden={"test_hidden.py": "from answer import answer\n\n\ndef test_answer():\n    assert answer() == 42\n"},
        solution={"answer.py": "def answer():\n    return 42\n"},
    )  # fmt: skip


def test_python_in_an_image_tasks_sandbox_is_the_images(image, backend, tmp_path):
    assert sys.version_info[:2] != (3, 13)  # control: the host's layer would print 3.11
    spec = spec_for_task(_task(tmp_path / "task", image))
    assert spec.environment is not None  # the task's layer is resolved, as for any task: it stays unbound

    async def go() -> list[tuple[int, str, str]]:
        sb = await backend.create(spec)
        try:
            out = []
            for cmd in (VERSION, "command -v python; echo $IMAGE_MARK; python -m pytest --version",
                        "rm -f /.sparring/bin/python; ln -s /bin/true /.sparring/bin/python3; ls /.sparring/bin",
                        "ln -s /bin/true /tmp/python3 && ls /tmp"):  # fmt: skip
                r = await sb.exec(cmd)
                out.append((r.exit_code, r.stdout, r.stderr))
            await sb.reset()
            r = await sb.exec(VERSION)
            out.append((r.exit_code, r.stdout, r.stderr))
            return out
        finally:
            await sb.close()

    version, which, guarded, control, after_reset = asyncio.run(go())
    assert version[0] == 0 and version[1].startswith("3.13."), version
    lines = which[1].splitlines()
    assert which[0] == 0 and lines[:2] == ["/.sparring/bin/python", "from-the-image"], which  # image's Env
    assert lines[2].startswith("pytest 8."), which
    # the link is the host's: the commands (capability-less uid 0) can neither remove nor add one ...
    assert guarded[1] == "python\n" and guarded[2].count("Permission denied") == 2, guarded
    assert control[0] == 0 and "python3" in control[1], control  # ... which they can where they may write
    assert after_reset[0] == 0 and after_reset[1].startswith("3.13."), after_reset


def test_an_image_without_python_is_refused_in_one_line_not_run_on_the_host_layer(image, backend, tmp_path):
    """The backend's own busybox image, named as the task's image, has no Python: `tasks check`'s
    rule says so in one line (the local backend's words); the Debian image is admitted."""
    bare = _task(tmp_path / "bare", backend.image)
    debian = _task(tmp_path / "debian", image)

    async def go() -> tuple[list, list, tuple[int, str], tuple[int, str]]:
        got = await check_image_interpreter(bare, backend), await check_image_interpreter(debian, backend)
        sb = await backend.create(spec_for_task(bare))
        try:
            r = await sb.exec(["python", "-c", "print(1)"])
            w = await sb.exec("command -v python python3; echo $?; ls /usr")
        finally:
            await sb.close()
        return *got, (r.exit_code, r.stderr), (w.exit_code, w.stdout)

    refused, admitted, direct, which = asyncio.run(go())
    assert "python" not in which[1] and which[1].endswith("\nbin\n"), which  # no layer, no host /usr
    assert [p.rule for p in refused] == ["image_interpreter"], refused
    detail = refused[0].detail
    assert "\n" not in detail and f"image {backend.image} has no working `python` on its PATH" in detail
    assert "sparring: command not found in sandbox: python" in detail, detail
    assert admitted == [], admitted
    assert direct == (127, "sparring: command not found in sandbox: python\n"), direct
