"""The golden set replays unchanged from its frozen inputs, a changed verdict is caught, and generators
cannot move it."""

from __future__ import annotations

import asyncio
import copy
import json

import pytest

from sparring.errors import ConfigError
from sparring.judge.quality.golden import (
    expected_reward,
    frozen_cases,
    golden_data,
    golden_path,
    materialize,
    replay,
)


@pytest.fixture(scope="module")
def golden():
    return json.loads(golden_path().read_text())


def test_golden_set_replays_without_changes(backend, tmp_path, golden):
    assert len(golden["cases"]) >= 75 and len(golden["tasks"]) >= 3
    families = {t["family"] for t in golden["tasks"].values()}
    assert {"code-repair", "function-impl"} <= families
    rep = asyncio.run(replay(backend, frozen_cases(golden, tmp_path), golden))
    assert rep.ok, rep.changed[:3]
    # Every reference scores full, every initial state and red-team hack zero.
    for c in golden["cases"]:
        assert c["verdict"]["reward"] == expected_reward(c["workspace"]), c
    # the hacks only the generated tests catch are in the set, fooling every fixed hidden test
    lookup = [c for c in golden["cases"] if c["workspace"] == "admission-hack:hidden_lookup"]
    assert lookup and all(c["verdict"]["components"]["hidden_fraction"] == 1.0 for c in lookup)
    # re-recording from the replay gives back the same file (frozen inputs round-trip)
    assert golden_data(rep) == {**golden, "judge_version": rep.judge_version}


def test_a_moved_verdict_fails_the_replay(backend, tmp_path, golden):
    bad = copy.deepcopy(golden)
    case = next(c for c in bad["cases"] if c["workspace"] == "reference")
    case["verdict"]["reward"] = 0.5
    others = [c for c in bad["cases"] if c["task"] == case["task"] and c is not case][:2]
    bad["cases"] = [case, *others]
    rep = asyncio.run(replay(backend, frozen_cases(bad, tmp_path), bad))
    assert not rep.ok and [(c["workspace"], c["why"]) for c in rep.changed] == [
        ("reference", "verdict changed")
    ]


def test_generators_cannot_move_the_golden_set(monkeypatch, tmp_path, golden):
    """Replaying never runs a generator or the red-team catalogue: the inputs are the frozen files."""

    def boom(*a, **k):
        raise AssertionError("a generator ran during a golden replay")

    monkeypatch.setattr("sparring.tasks.families.generate", boom)
    monkeypatch.setattr("sparring.judge.quality.golden.build_tasks", boom)
    monkeypatch.setattr("sparring.judge.quality.golden.HACKS", {})
    cases = frozen_cases(golden, tmp_path)
    assert len(cases) == len(golden["cases"])
    assert {c.task.id: c.task.digest for c in cases} == {k: v["digest"] for k, v in golden["tasks"].items()}


def test_a_hand_edited_frozen_task_is_refused(tmp_path, golden):
    bad = copy.deepcopy(golden)
    tid = next(iter(bad["tasks"]))
    files = bad["tasks"][tid]["files"]
    rel = next(r for r in files if r.startswith("hidden/") and "text" in files[r])
    files[rel]["text"] += "\n# edited\n"
    with pytest.raises(ConfigError, match="frozen files give"):
        materialize(bad, tmp_path / "a")
    old = {k: v for k, v in golden.items() if k != "format"}
    with pytest.raises(ConfigError, match="--rebuild"):
        materialize(old, tmp_path / "b")
    escape = copy.deepcopy(golden)
    escape["tasks"][tid]["files"]["../evil"] = {"text": "x"}
    with pytest.raises(ConfigError, match="unsafe path"):
        materialize(escape, tmp_path / "c")
