"""Admission rules for a task whose ``[environment] image`` names an OCI image (docs/images.md).

``image_pinned``       the image is named by digest (``REF@sha256:<64 hex>``), never by a moving tag:
                       the task's digest then covers the exact image it is judged in
``image_interpreter``  the image's ``python`` (the one the judge's in-sandbox code runs on) is in the
                       supported range, :data:`PYTHON_RANGE`, with a pytest in :data:`PYTEST_RANGE`;
                       asked of the image itself, in a sandbox of the task, before any judge run
"""

from __future__ import annotations

import re

from sparring.admission.problem import Problem
from sparring.errors import SparringError
from sparring.sandbox.base import SandboxBackend
from sparring.tasks.loader import Task

PINNED = re.compile(r"@sha256:[0-9a-f]{64}$")
PYTHON_RANGE = ((3, 8), (3, 13))
"""The Pythons the judge's in-sandbox modules (judge/inside/) support, both ends included."""
PYTEST_RANGE = (7, 9)
"""The pytest major versions they support, both ends included."""
PROBE = (
    "import sys; print('%d.%d.%d' % tuple(sys.version_info[:3])); import pytest; print(pytest.__version__)"
)
"""Prints the interpreter's version, then pytest's (a Python 2 still prints its version, to be refused)."""
PROBE_TIMEOUT_S = 60.0


def check_image_pinned(task: Task) -> list[Problem]:
    """A task's image must be pinned by digest: a tag can name another image tomorrow."""
    image = task.spec.environment.image
    if image is None or PINNED.search(image):
        return []
    return [
        Problem(
            "image_pinned",
            f"[environment] image {image!r} is a moving tag, not REF@sha256:<digest>: "
            f"run `sparring tasks pin {task.path}` (it pins the tag to the digest it names in the image store)",
        )
    ]


def _version(text: str) -> tuple[int, ...] | None:
    m = re.match(r"\s*(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def interpreter_problems(image: str, exit_code: int, stdout: str, stderr: str) -> list[Problem]:
    """The verdict on what :data:`PROBE` printed in ``image`` (pure: the rule's words live here)."""
    lines = stdout.split()
    python = _version(lines[0]) if lines else None
    pytest = _version(lines[1]) if len(lines) > 1 and exit_code == 0 else None
    (lo, hi), (plo, phi) = PYTHON_RANGE, PYTEST_RANGE
    if python is None:
        last = (stderr.strip().splitlines() or [f"exit {exit_code}"])[-1][:200]
        why = f"has no working `python` on its PATH ({last})"
    elif not lo <= python <= hi:
        why = f"runs Python {lines[0]}"
    elif pytest is None:
        why = f"has Python {lines[0]}, which cannot import pytest"
    elif not plo <= pytest[0] <= phi:
        why = f"has pytest {lines[1]} (Python {lines[0]})"
    else:
        return []
    supported = (
        f"the judge supports Python {lo[0]}.{lo[1]}-{hi[0]}.{hi[1]} with pytest {plo}-{phi} (docs/images.md)"
    )
    return [Problem("image_interpreter", f"image {image} {why}: {supported}")]


async def check_image_interpreter(task: Task, backend: SandboxBackend) -> list[Problem]:
    """Ask the task's image which Python and pytest it runs, in a sandbox of the task (the judge's
    ``python``, from ``/``, so nothing in the workspace shadows pytest); nothing to ask without an image."""
    from sparring.tasks.sandbox_spec import aspec_for_task

    image = task.spec.environment.image
    if image is None:
        return []
    try:
        sb = await backend.create(await aspec_for_task(task))
        try:
            r = await sb.exec(["python", "-s", "-c", PROBE], timeout=PROBE_TIMEOUT_S, cwd="/")
        finally:
            await sb.close()
    except SparringError as e:
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        return [Problem("image_interpreter", f"asking image {image} for its Python failed: {first}")]
    return interpreter_problems(image, r.exit_code, r.stdout, r.stderr)
