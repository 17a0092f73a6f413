"""A flagged workspace never becomes a task's initial state (the failure library cannot launder a hack).

The judge's static checks read only what an agent added to the initial workspace. Positive control:
a startup hook the checks flag when an agent adds it is invisible to them once it is part of the initial
workspace (a later agent's one-byte diff switching it on raises no flag). Containment: `failures
promote --as tasks` refuses a flagged cluster with a one-line error naming the flags and the way out
(--as regression), and writes nothing; an unflagged cluster still promotes.
"""

from __future__ import annotations

import pytest

from sparring.errors import ConfigError, TaskError
from sparring.judge.static.hacks import static_flags
from sparring.sandbox.base import WorkspaceDiff
from sparring.store.failures import cluster, promote_tasks
from sparring.tasks.loader import load_task, write_task
from sparring.trajectory import Trajectory

HOOK = {"sitecustomize.py": b"import os\nif os.path.exists('/workspace/ON'):\n    os.environ['PASS'] = '1'\n"}


def _t(clamp_task, flags: list[str]) -> Trajectory:
    return Trajectory(id="f" * 16, task_id=clamp_task.id, task_digest=clamp_task.digest, policy="p", status="ok",
                      reward=0.0, flags=flags, diff=WorkspaceDiff(files=dict(HOOK)).to_json())  # fmt: skip


def test_a_flagged_workspace_is_refused_as_a_task(clamp_task, tmp_path):
    flags = static_flags(WorkspaceDiff(files=dict(HOOK)), clamp_task.workspace)
    assert flags, "positive control: the hook is flagged when an agent adds it"
    tasks = {(clamp_task.id, clamp_task.digest): clamp_task}
    # Positive control of the laundering: promoted without its flags, the hook is the new task's own...
    (made,) = promote_tasks([_t(clamp_task, [])], tasks, tmp_path / "plain", "c0", 1)
    new = load_task(made["path"])
    assert (new.workspace / "sitecustomize.py").read_bytes() == HOOK["sitecustomize.py"]
    # ...and a later agent switching it on with a one-byte file raises no flag.
    assert static_flags(WorkspaceDiff(files={"ON": b"1"}), new.workspace) == []
    # Containment: the flagged cluster (as the judge stored it) is refused, and nothing is written.
    with pytest.raises(ConfigError, match=r"flagged .*--as regression"):
        promote_tasks([_t(clamp_task, flags)], tasks, tmp_path / "flagged", "c1", 1)
    assert not (tmp_path / "flagged").exists()


@pytest.mark.parametrize(
    ("status", "flags"), [("ok", []), ("truncated", []), ("ok", ["test_tampering"]), ("infra_error", []),
                          ("judge_error", []), ("truncated", ["config_tampering", "runtime_probe"])],
)  # fmt: skip
def test_what_failures_list_offers_is_what_promote_accepts(clamp_task, tmp_path, status, flags):
    """`failures list` says per cluster what it can be promoted as; `promote --as tasks` agrees with it."""
    t = _t(clamp_task, flags).model_copy(
        update={"status": status, "reward": None if "error" in status else 0.0}
    )
    (c,) = cluster([t])
    assert c.to_json()["promote_as"] == c.promote_as and "regression" in c.promote_as
    tasks = {(clamp_task.id, clamp_task.digest): clamp_task}
    if "tasks" in c.promote_as:
        (made,) = promote_tasks([t], tasks, tmp_path / "new", c.id, 1)
        assert load_task(made["path"]).id == made["id"]
    else:
        with pytest.raises(ConfigError, match="--as regression"):
            promote_tasks([t], tasks, tmp_path / "new", c.id, 1)
        assert not (tmp_path / "new").exists()
    assert ("tasks" in c.promote_as) == (status in ("ok", "truncated") and not flags)


@pytest.mark.parametrize(
    "bad", ["../escape.txt", "ws/../../escape.txt", "a/./../../escape.txt", "ABS", "", ".", "a\x00b"]
)
def test_task_files_are_written_only_inside_the_task(clamp_task, tmp_path, bad):
    """Names from data (an agent's diff, an imported dataset) cannot steer a task write onto the host.
    Positive control: joined as a path, the traversing and absolute names land outside the task dir."""
    canary = tmp_path / "escape.txt"
    name = str(canary) if bad == "ABS" else bad
    if bad in ("ABS", "../escape.txt"):
        assert (tmp_path / "out" / "workspace" / name).resolve().parent != (tmp_path / "out" / "workspace")
    with pytest.raises(TaskError, match="refusing to write task file"):
        write_task(tmp_path / "out" / "t", clamp_task.spec, workspace={name: "x"}, hidden={}, solution={})
    assert not canary.exists() and not (tmp_path / "out" / "t").exists()
    assert [p.name for p in (tmp_path / "out").iterdir()] == []  # the temp build dir is gone too


def test_harmless_spellings_of_a_name_inside_are_written_normalised(clamp_task, tmp_path):
    """``./data.txt`` (as importers write it) and ``a//b`` name files inside the task: written as ``data.txt``, ``a/b``."""
    t = write_task(
        tmp_path / "t", clamp_task.spec, workspace={"./data.txt": "x", "a//b": "y"}, hidden={}, solution={}
    )
    assert (t.workspace / "data.txt").read_text() == "x" and (t.workspace / "a" / "b").read_text() == "y"
