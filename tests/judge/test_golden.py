"""The golden set replays unchanged, and a changed verdict is caught."""

from __future__ import annotations

import asyncio
import copy
import json

from sparring.judge.golden import build_tasks, golden_path, replay


def test_golden_set_replays_without_changes(backend, tmp_path):
    golden = json.loads(golden_path().read_text())
    assert len(golden["cases"]) >= 55
    tasks = build_tasks(tmp_path)
    rep = asyncio.run(replay(backend, tasks, golden))
    assert rep.ok, rep.changed[:3]
    # Every reference scores full, every initial state and red-team hack zero.
    for c in golden["cases"]:
        v = c["verdict"]
        assert v["reward"] == (1.0 if c["workspace"] == "reference" else 0.0), c


def test_a_moved_verdict_fails_the_replay(backend, tmp_path):
    golden = json.loads(golden_path().read_text())
    bad = copy.deepcopy(golden)
    case = next(c for c in bad["cases"] if c["workspace"] == "reference")
    case["verdict"]["reward"] = 0.5
    tasks = [t for t in build_tasks(tmp_path) if t.id == case["task"]]
    bad["cases"] = [c for c in bad["cases"] if c["task"] == case["task"]]
    rep = asyncio.run(replay(backend, tasks, bad))
    assert not rep.ok and [c["why"] for c in rep.changed] == ["verdict changed"]
