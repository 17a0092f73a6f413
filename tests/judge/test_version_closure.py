"""The judge version covers the whole import closure of the scoring code, not a hand-kept list.

Each module of the closure is edited in a copy of the package (a comment appended) and the code
digest recomputed there: every edit must move it. A module no scoring path imports must not.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import sparring
from sparring.judge.inside import module_files
from sparring.judge.version import scoring_closure

PKG = Path(sparring.__file__).resolve().parent

PROBE = r"""
import json, sys
from pathlib import Path
from sparring.judge import version

root = Path(sys.argv[1]) / "sparring"
def path_of(name):
    rel = Path(*name.split(".")[1:])
    p = root / rel.with_suffix(".py") if name != "sparring" else root / "__init__.py"
    return p if p.is_file() else root / rel / "__init__.py"

def digest():
    version.scoring_closure.cache_clear()
    return version.code_digest()

base = digest()
moved, unmoved = [], []
for name in json.loads(sys.argv[2]):
    p = path_of(name)
    before = p.read_bytes()
    p.write_bytes(before + b"\n# edited\n")
    (moved if digest() != base else unmoved).append(name)
    p.write_bytes(before)
print(json.dumps({"base": base, "moved": moved, "unmoved": unmoved, "again": digest() == base}))
"""


def _edit_each(tmp_path: Path, names: list[str]) -> dict:
    copy = tmp_path / "src"
    shutil.copytree(PKG, copy / "sparring", ignore=shutil.ignore_patterns("__pycache__"))
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(copy), json.dumps(names)],
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    return json.loads(out.stdout)


def test_the_closure_holds_the_modules_a_hand_list_missed():
    closure = set(scoring_closure())
    missed_before = {"sparring.judge.dynamic.skeleton", "sparring.tasks.testfiles", "sparring.tasks.hidden_suite",
                     "sparring.tasks.dynamic_format", "sparring.pyast"}  # fmt: skip
    assert missed_before <= closure
    assert "sparring.judge.pytest_judge" in closure and "sparring.judge.inside.judge_driver" in closure
    assert {f"sparring.judge.inside.{n.removesuffix('.py')}" for n in module_files()} <= closure
    assert "sparring.train.grpo" not in closure  # training code does not decide scores


def test_editing_any_module_of_the_closure_changes_the_judge_version(tmp_path):
    names = list(scoring_closure())
    result = _edit_each(tmp_path, [*names, "sparring.train.grpo"])
    assert result["again"], "restoring every file restores the digest"
    # positive control: a module outside the closure moves nothing
    assert result["unmoved"] == ["sparring.train.grpo"], result["unmoved"]
    assert sorted(result["moved"]) == sorted(names)
