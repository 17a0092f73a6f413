"""`tasks import --format swe-bench --image-template` (issue 34): a SWE-style image (the Debian test image
plus a layer holding a repository at /testbed, its test failing) in a real registry on loopback, named
the way SWE-bench names instance images, imported from a one-instance JSONL. The task is pinned to the
image's digest (a tag pulled through the image store), says /testbed is its workspace in the image,
its workspace is that tree without .git; `tasks check` admits it and the judge scores the gold patch 1
and the unchanged tree 0 on the image's interpreter."""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
from image_support import DEBIAN_RECIPE, debian_layout, entry, layered_layout, push, registry, tar_bytes

from sparring.errors import ConfigError
from sparring.tasks.importers.swe_bench import image_name

SPARRING = [str(Path(sys.executable).parent / "sparring")]
INSTANCE_ID = "Acme__calc-7"
CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
CALC_FIXED = CALC.replace("a - b", "a + b")
TESTS = "from calc import mul\n\n\ndef test_mul():\n    assert mul(3, 4) == 12\n"
TESTS_NEW = TESTS.replace("from calc import mul", "from calc import add, mul") + (
    "\n\ndef test_add():\n    assert add(2, 3) == 5\n"
)


def test_image_names_follow_swe_bench():
    t = "127.0.0.1:5000/sweb.eval.x86_64.{instance_id}:latest"
    assert (
        image_name(t, "django__django-11099")
        == "127.0.0.1:5000/sweb.eval.x86_64.django_1776_django-11099:latest"
    )
    assert image_name(t, "Acme__calc-7") == "127.0.0.1:5000/sweb.eval.x86_64.acme_1776_calc-7:latest"
    with pytest.raises(ConfigError, match=r"has no \{instance_id\}"):
        image_name("reg/sweb:latest", "x")


def _diff(path: str, old: str, new: str) -> str:
    """A git-style unified diff of one file (what SWE-bench's patch fields hold)."""
    body = difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="image roots are bound by the host: overlay mode (root)")
def test_an_instance_imports_from_its_image(tmp_path):
    layer = tar_bytes([
        entry("testbed/", tarfile.DIRTYPE), entry("testbed/tests/", tarfile.DIRTYPE),
        entry("testbed/.git/", tarfile.DIRTYPE), entry("testbed/.git/HEAD", data=b"ref: refs/heads/main\n"),
        entry("testbed/calc.py", data=CALC.encode()), entry("testbed/tests/test_calc.py", data=TESTS.encode()),
    ])  # fmt: skip
    layout = layered_layout(debian_layout(DEBIAN_RECIPE), layer, tmp_path / "swe-layout")
    instance = {
        "instance_id": INSTANCE_ID, "repo": "acme/calc", "base_commit": "0123456789abcdef0123456789abcdef01234567",
        "patch": _diff("calc.py", CALC, CALC_FIXED),
        "test_patch": _diff("tests/test_calc.py", TESTS, TESTS_NEW),
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
        "PASS_TO_PASS": json.dumps(["tests/test_calc.py::test_mul"]),
        "problem_statement": "add() subtracts instead of adding.",
    }  # fmt: skip
    src = tmp_path / "instances.jsonl"
    src.write_text(json.dumps(instance) + "\n")
    env = {**os.environ, "SPARRING_IMAGE_ROOT": str(tmp_path / "images")}
    with registry(tmp_path / "registry") as host:
        push(layout, f"{host}/sweb.eval.x86_64.acme_1776_calc-7:latest")
        r = subprocess.run([*SPARRING, "tasks", "import", str(src), "--format", "swe-bench", "--out", str(tmp_path / "out"),
                            "--image-template", f"{host}/sweb.eval.x86_64.{{instance_id}}:latest", "--json"],
                           capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        # control: no such image, one line naming it, nothing written
        bad = subprocess.run([*SPARRING, "tasks", "import", str(src), "--format", "swe-bench", "--out", str(tmp_path / "bad"),
                              "--image-template", f"{host}/nothing.{{instance_id}}:latest"],
                             capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert (
        bad.returncode != 0 and "nothing.acme_1776_calc-7" in bad.stderr and not (tmp_path / "bad").exists()
    )
    (t,) = json.loads(r.stdout)["tasks"]
    task = Path(t["path"])
    environment = tomllib.loads((task / "task.toml").read_text())["environment"]
    image = environment["image"]
    assert image.startswith(f"{host}/sweb.eval.x86_64.acme_1776_calc-7:latest@sha256:"), image
    assert environment["workspace"] == "/testbed"
    assert sorted(p.relative_to(task / "workspace").as_posix() for p in (task / "workspace").rglob("*") if p.is_file()) == [
        "calc.py", "tests/test_calc.py"
    ]  # fmt: skip
    assert (task / "solution" / "calc.py").read_text() == CALC_FIXED
    r = subprocess.run([*SPARRING, "tasks", "check", str(task), "--json", "--repeats", "2"],
                       capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    checked = json.loads(r.stdout)["tasks"][0]
    assert r.returncode == 0 and checked["ok"], checked
    ws = tmp_path / "ws"
    scores = []
    for text in (CALC, CALC_FIXED):
        (ws / "tests").mkdir(parents=True, exist_ok=True)
        (ws / "tests" / "test_calc.py").write_text(TESTS)
        (ws / "calc.py").write_text(text)
        r = subprocess.run([*SPARRING, "judge", "score", "--task", str(task), "--workspace", str(ws), "--json"],
                           capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        scores.append(json.loads(r.stdout)["reward"])
    assert scores == [0.0, 1.0]
