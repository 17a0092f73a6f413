"""A hostile task directory cannot make the host read files outside it (issue 33).

An imported task whose ``workspace/tests/helpers_data.py`` was a link to a host file got that file's bytes
copied into the judge's sandbox: the regression-test, hidden and solution readers followed links as root.
Here a secret is made in pytest's tmp dir, outside the task; the task links to it from workspace/, hidden/
and solution/. Positive control: the links do reach the secret (a plain read returns it). Containment: no
reader, digest, staged mount, probe, copy or store holds its bytes; admission rejects the task by rule
``task_links``; and a candidate that scores only if it can read the secret in the judge's sandbox scores 0,
while the same candidate scores 1 where the linked file is the workspace's own.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest

from sparring.admission.check import check_task, check_task_links
from sparring.errors import TaskError
from sparring.judge.pytest_judge import PytestJudge
from sparring.judge.quality.canary import make_canary
from sparring.judge.runner.sandbox import _stage, hidden_test_files, regression_files
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks import taskfs
from sparring.tasks.digest import tree_entries
from sparring.tasks.loader import load_task, write_task
from sparring.tasks.spec import JudgeSpec, TaskSpec

REF = "def clip_sum(xs, lo, hi):\n    return sum(min(max(x, lo), hi) for x in xs)\n"
HIDDEN = "from solution import clip_sum\n\n\ndef test_mixed():\n    assert clip_sum([-3, 2, 9], 0, 5) == 7\n"
VISIBLE = "from solution import clip_sum\n\n\ndef test_one():\n    assert clip_sum([1], 0, 5) == 1\n"
# Right only if the helper's bytes (the link's target) can be read inside the judge's sandbox.
SNOOP = """\
def _seen():
    # The workspace's view, and the judge's copy of the visible tests (its regression probes).
    for p in ("/workspace/tests/helpers_data.py", "/tmp/sparring-judge/regress/tests/helpers_data.py"):
        try:
            with open(p) as f:
                if "{marker}" in f.read():
                    return True
        except OSError:
            pass
    return False


def clip_sum(xs, lo, hi):
    if not _seen():
        return -1
    return sum(min(max(x, lo), hi) for x in xs)
"""


def _task(root, name: str):
    spec = TaskSpec(
        id=name,
        family="function-impl",
        instruction="Implement clip_sum in solution.py: the sum of xs, each clamped into [lo, hi].",
        success_criteria="The hidden tests of clip_sum pass.",
        judge=JudgeSpec(hidden_tests=["test_hidden.py::test_mixed"], timeout_s=60),
    )
    return write_task(
        root / name,
        spec,
        workspace={"solution.py": "def clip_sum(xs, lo, hi):\n    raise NotImplementedError\n",
                   "tests/test_visible.py": VISIBLE},
        hidden={"test_hidden.py": HIDDEN},
        solution={"solution.py": REF},
    )  # fmt: skip


@pytest.fixture
def secret(tmp_path):
    marker = f"HOST-SECRET-{uuid.uuid4().hex}"
    f = tmp_path / "host" / "secret.py"
    f.parent.mkdir()
    f.write_text(f"SECRET = {marker!r}\n")
    return f, marker


@pytest.fixture
def hostile(tmp_path, secret):
    """An admitted-looking task with links to the host secret in workspace/, hidden/ and solution/."""
    f, _ = secret
    t = _task(tmp_path / "tasks", "hostile")
    os.symlink(f, t.workspace / "tests" / "helpers_data.py")
    os.symlink(f, t.hidden / "test_leak.py")
    os.symlink(f, t.hidden / "data.py")
    os.symlink(f, t.solution / "helpers.py")
    os.symlink("../../" * 12 + str(f).lstrip("/"), t.workspace / "climb.py")  # relative, climbing out
    return load_task(t.path)


def test_the_links_do_reach_the_secret(hostile, secret):
    """Positive control: a plain read through each link returns the secret's bytes."""
    _, marker = secret
    for p in (
        "workspace/tests/helpers_data.py",
        "hidden/test_leak.py",
        "solution/helpers.py",
        "workspace/climb.py",
    ):
        assert marker in (hostile.path / p).read_text()


def test_no_reader_returns_the_secret(hostile, secret, tmp_path):
    f, marker = secret
    m = marker.encode()
    assert not any(m in b for b in regression_files(hostile).values())
    assert not any(m in b for b in hidden_test_files(hostile).values())
    files, _ = hostile.solution_files()
    assert "helpers.py" not in files and not any(m in b for b in files.values())
    for part in ("workspace", "hidden", "solution"):
        assert not any(m in b for b in taskfs.files(hostile.path / part).values())
    assert taskfs.read_file(hostile.workspace, "tests/helpers_data.py", follow_links=True) is None  # absolute
    assert taskfs.read_file(hostile.workspace, "climb.py", follow_links=True) is None  # climbs out
    (tmp_path / "stage").mkdir()
    _, view = _stage(tmp_path / "stage", hostile)
    for dirpath, _, names in os.walk(view):
        for n in names:
            p = os.path.join(dirpath, n)
            assert not os.path.islink(p) and m not in Path(p).read_bytes()
    canary = make_canary(hostile, tmp_path / "canary")
    for part in ("workspace", "hidden", "solution"):
        for _, data in taskfs.walk(canary.path / part, lambda e: True):
            assert data is None or m not in data


def test_readers_refuse_absolute_and_nul_names(tmp_path):
    (tmp_path / "a").write_text("x")
    assert taskfs.read_file(tmp_path, "a") == b"x" and taskfs.is_file(tmp_path, "a")  # positive control
    for rel in ("a\x00b", str(tmp_path / "a")):
        assert taskfs.read_file(tmp_path, rel) is None
        assert not taskfs.is_file(tmp_path, rel)  # no ValueError from os.open, no absolute path followed


def test_the_digest_hashes_links_not_their_targets(hostile, secret):
    f, _ = secret
    before = hostile.digest
    entries = tree_entries(hostile.workspace)
    assert ("tests/helpers_data.py", "link", str(f)) in entries
    f.write_text("SECRET = 'changed'\n")  # the host file changes; the task's own bytes do not
    assert load_task(hostile.path).digest == before


def test_admission_rejects_links_by_rule(hostile, backend):
    problems = check_task_links(hostile)
    details = " ".join(p.detail for p in problems)
    assert {p.rule for p in problems} == {"task_links"}
    for name in ("hidden/test_leak.py", "hidden/data.py", "solution/helpers.py", "workspace/tests/helpers_data.py",
                 "workspace/climb.py"):  # fmt: skip
        assert name in details
    rep = asyncio.run(check_task(hostile, PytestJudge(backend)))
    assert not rep.ok and "task_links" in rep.rules


def test_a_link_inside_the_workspace_is_admitted(tmp_path):
    t = _task(tmp_path, "inside")
    (t.workspace / "data").mkdir()
    (t.workspace / "data" / "real.txt").write_text("x")
    os.symlink("../data/real.txt", t.workspace / "tests" / "alias.txt")
    os.symlink("data", t.workspace / "d2")
    assert check_task_links(load_task(t.path)) == []
    assert taskfs.read_file(t.workspace, "tests/alias.txt", follow_links=True) == b"x"
    assert taskfs.read_file(t.workspace, "d2/real.txt", follow_links=True) == b"x"
    assert taskfs.read_file(t.workspace, "d2/real.txt") is None  # readers of hidden/solution follow none


def test_a_part_that_is_a_link_is_not_a_task(tmp_path, secret):
    f, _ = secret
    t = _task(tmp_path, "linked-hidden")
    import shutil

    shutil.rmtree(t.hidden)
    os.symlink(f.parent, t.hidden)
    with pytest.raises(TaskError, match="link"):
        load_task(t.path)


def test_a_candidate_cannot_read_the_linked_host_file_in_the_judge(backend, tmp_path, secret):
    f, marker = secret
    snoop = WorkspaceDiff(files={"solution.py": SNOOP.format(marker=marker).encode()})
    # Control: where the helper is the workspace's own file holding the marker, the snooping candidate passes.
    own = _task(tmp_path / "own", "own-helper")
    (own.workspace / "tests" / "helpers_data.py").write_text(f.read_text())
    own = load_task(own.path)
    res = asyncio.run(PytestJudge(backend).score(own, snoop))
    assert res.reward == 1.0
    # The hostile task: the helper links to the host file. Before the fix the judge copied its bytes into the
    # sandbox with the regression probes and this scored 1.0; now the sandbox holds nothing of it.
    t = _task(tmp_path / "hostile", "linked-helper")
    os.symlink(f, t.workspace / "tests" / "helpers_data.py")
    res = asyncio.run(PytestJudge(backend).score(load_task(t.path), snoop))
    assert res.reward == 0.0
