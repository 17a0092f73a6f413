"""Admission of a task on an image (issue 34): `tasks check` refuses a moving tag (`image_pinned`) and
an image whose Python or pytest the judge does not support (`image_interpreter`, asked of the image
itself); the pinned digest is part of the task's digest; the judge's in-sandbox modules keep to
Python 3.8."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from image_support import DEBIAN_RECIPE, debian_layout, entry, layered_layout, tar_bytes

from sparring.admission.image import PYTEST_RANGE, PYTHON_RANGE, check_image_pinned, interpreter_problems
from sparring.images.archive import import_archive
from sparring.images.store import ImageStore
from sparring.judge.inside import module_files
from sparring.tasks.loader import load_task
from sparring.tasks.pin import image_pinned_text, pin_task
from tests_support import make_clamp_task

SPARRING = [str(Path(sys.executable).parent / "sparring")]
DIGEST_A = "sha256:" + "a" * 64
DIGEST_B = "sha256:" + "b" * 64
JUDGE_DIR = Path(__file__).resolve().parents[2] / "src" / "sparring" / "judge" / "inside"


def _with_image(task_dir: Path, image: str) -> None:
    f = task_dir / "task.toml"
    text = f.read_text()
    if "[environment]" not in text:
        text += "\n[environment]\n"
    f.write_text(text.replace("[environment]\n", f'[environment]\nimage = "{image}"\n', 1))


# --------------------------------------------------------------------------- image_pinned, the digest


def test_a_moving_tag_is_refused_and_a_digest_admitted(tmp_path):
    task = make_clamp_task(tmp_path / "task")
    _with_image(task.path, "ghcr.io/org/env:latest")
    (p,) = check_image_pinned(load_task(task.path))
    assert p.rule == "image_pinned" and f"sparring tasks pin {task.path}" in p.detail and "\n" not in p.detail
    for almost in (f"ghcr.io/org/env@sha256:{'a' * 63}", "ghcr.io/org/env:sha256"):  # not a whole digest
        text = image_pinned_text((task.path / "task.toml").read_text(), almost)
        (task.path / "task.toml").write_text(text)
        assert [q.rule for q in check_image_pinned(load_task(task.path))] == ["image_pinned"]
    text = image_pinned_text((task.path / "task.toml").read_text(), f"ghcr.io/org/env:1@{DIGEST_A}")
    (task.path / "task.toml").write_text(text)
    assert check_image_pinned(load_task(task.path)) == []
    assert check_image_pinned(make_clamp_task(tmp_path / "no-image")) == []  # no image: nothing to pin


def test_the_pinned_image_digest_is_part_of_the_task_digest(tmp_path):
    task = make_clamp_task(tmp_path / "task")
    pin_task(task.path)
    _with_image(task.path, f"ghcr.io/org/env:1@{DIGEST_A}")
    a = load_task(task.path).digest
    assert load_task(task.path).digest == a  # control: the same bytes, the same digest
    f = task.path / "task.toml"
    f.write_text(image_pinned_text(f.read_text(), f"ghcr.io/org/env:1@{DIGEST_B}"))
    assert load_task(task.path).digest != a


# --------------------------------------------------------------------------- image_interpreter


@pytest.mark.parametrize(
    "stdout, exit_code, ok",
    [
        ("3.8.0\n7.0.0\n", 0, True),
        ("3.13.1\n9.0.2\n", 0, True),
        ("3.11.2\n8.3.5\n", 0, True),
        ("3.7.17\n7.4.4\n", 0, False),
        ("3.14.0\n8.3.5\n", 0, False),
        ("2.7.18\n", 1, False),
        ("3.12.3\n", 1, False),  # no pytest
        ("3.12.3\n6.2.5\n", 0, False),
        ("3.12.3\n10.0.0\n", 0, False),
        ("", 127, False),  # no python at all
    ],
)
def test_the_interpreter_verdict(stdout, exit_code, ok):
    problems = interpreter_problems("img@" + DIGEST_A, exit_code, stdout, "python: not found\n")
    assert (problems == []) is ok
    for p in problems:
        assert p.rule == "image_interpreter" and "\n" not in p.detail
        assert PYTHON_RANGE == ((3, 8), (3, 13)) and PYTEST_RANGE == (7, 9)
        assert "the judge supports Python 3.8-3.13 with pytest 7-9" in p.detail


@pytest.mark.parametrize("name", module_files())
def test_in_sandbox_modules_keep_to_python_3_8(name):
    """What runs on the image's interpreter parses as Python 3.8 and calls nothing newer that a
    3.8 parser would let through (str.removeprefix, zip(strict=), ...)."""
    tree = ast.parse((JUDGE_DIR / name).read_text(), feature_version=(3, 8))
    newer_attrs = {"removeprefix", "removesuffix", "is_relative_to", "with_stem", "bit_count", "lcm"}
    newer_modules = {"zoneinfo", "graphlib", "tomllib"}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in newer_attrs:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Call) and any(k.arg == "strict" for k in node.keywords):
            found.append(f"line {node.lineno}: strict=")
        elif isinstance(node, ast.Import | ast.ImportFrom):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            found += [f"line {node.lineno}: import {m}" for m in mods if m.split(".")[0] in newer_modules]
    assert found == [], f"{name} uses Python 3.9+: {found}"


def test_the_checker_catches_a_newer_call():
    """Positive control: the scan above finds what it looks for."""
    tree = ast.parse("x = 'ab'.removeprefix('a')\n", feature_version=(3, 8))
    assert any(isinstance(n, ast.Attribute) and n.attr == "removeprefix" for n in ast.walk(tree))
    with pytest.raises(SyntaxError):
        ast.parse("if (n := 1):\n    pass\nmatch n:\n    case 1: pass\n", feature_version=(3, 8))


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="image roots are bound by the host: overlay mode (root)")
def test_tasks_check_asks_the_image_and_refuses_what_the_judge_cannot_run(tmp_path):
    """The Debian test image (Python 3.13, pytest 8: admitted in test_judge_in_image) with one more
    layer: a `python` claiming 3.7 first on PATH, or pytest whited out. `tasks check` refuses both by
    rule, before any judge run, and a tag also breaks image_pinned."""
    store = ImageStore(tmp_path / "images")
    base = debian_layout(DEBIAN_RECIPE)
    old_python = tar_bytes([entry("usr/local/bin/python", data=b"#!/bin/sh\necho 3.7.17\n", mode=0o755)])
    no_pytest = tar_bytes([entry("usr/lib/python3/dist-packages/.wh.pytest")])
    digests = {}
    for name, layer in (("old-python", old_python), ("no-pytest", no_pytest)):
        layout = layered_layout(base, layer, tmp_path / name)
        digests[name] = import_archive(store, layout, tag=f"sparring-test/{name}:1").digest
    env = {**os.environ, "SPARRING_IMAGE_ROOT": str(store.root)}
    cases = {
        "sparring-test/old-python:1": ({"image_pinned", "image_interpreter"}, "runs Python 3.7.17"),
        f"sparring-test/no-pytest:1@{digests['no-pytest']}": (
            {"image_interpreter"},
            "which cannot import pytest",
        ),
    }
    for i, (image, (rules, says)) in enumerate(cases.items()):
        task = make_clamp_task(tmp_path / f"task{i}")
        pin_task(task.path)
        _with_image(task.path, image)
        r = subprocess.run([*SPARRING, "tasks", "check", str(task.path), "--json"],
                           capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
        assert r.returncode != 0, r.stdout
        checked = json.loads(r.stdout)["tasks"][0]
        assert {p["rule"] for p in checked["problems"]} == rules, checked
        detail = next(p["detail"] for p in checked["problems"] if p["rule"] == "image_interpreter")
        assert says in detail and "Python 3.8-3.13 with pytest 7-9" in detail, detail
