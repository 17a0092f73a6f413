"""Training config keys `tasks` / `heldout_tasks` (issue 35) and the loop's admission gate (issue 33)."""

from __future__ import annotations

import asyncio
import json

import pytest

from sparring.errors import ConfigError, TaskError
from sparring.tasks.loader import ADMISSION_FILE
from sparring.tasks.template import new_task
from sparring.train.config import load_config
from sparring.train.run_tasks import collect_tasks, gate_tasks


def test_tasks_alone_or_beside_a_family(tmp_path):
    new_task(tmp_path / "mine" / "wc")
    alone = load_config(None, [f"tasks={tmp_path / 'mine'}"])
    assert alone.family is None and alone.tasks == tmp_path / "mine"
    beside = load_config(None, [f"tasks={tmp_path / 'mine'}", "family=shell-ops", "n_train=2", "n_heldout=1",
                                "tasks_per_iteration=2", f"workdir={tmp_path / 'w'}"])  # fmt: skip
    run = collect_tasks(beside, lambda s: None)
    assert len(run.train) == 3 and "wc" in {t.id for t in run.train} and len(run.heldout) == 1
    run = collect_tasks(alone, lambda s: None)
    assert [t.id for t in run.train] == [t.id for t in run.heldout] == ["wc"]


def test_bad_tasks_paths_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="tasks: .* does not exist"):
        load_config(None, [f"tasks={tmp_path / 'nope'}"])
    with pytest.raises(ConfigError, match="no training tasks"):
        load_config(None, ["family=null"])


def _reject(task, judge_version):
    rec = {"digest": task.digest, "ok": False, "judge_version": judge_version,
           "problems": [{"rule": "solution_passes", "detail": "the reference fails"}]}  # fmt: skip
    (task.path / ADMISSION_FILE).write_text(json.dumps(rec))


def test_gate_skips_generated_rejects_and_refuses_own_rejects(tmp_path, monkeypatch):
    from sparring.admission.gate import admission_judge_version

    monkeypatch.delenv("SPARRING_ALLOW_UNADMITTED", raising=False)
    jv = admission_judge_version()
    own = new_task(tmp_path / "mine" / "wc")
    cfg = load_config(None, [f"tasks={tmp_path / 'mine'}", "family=shell-ops", "n_train=2", "n_heldout=1",
                             "tasks_per_iteration=2", f"workdir={tmp_path / 'w'}"])  # fmt: skip
    run = collect_tasks(cfg, lambda s: None)
    for t in run.all():  # recorded verdicts: the gate runs no judge
        rec = {"digest": t.digest, "ok": True, "judge_version": jv, "problems": []}
        (t.path / ADMISSION_FILE).write_text(json.dumps(rec))
    _reject(run.generated_train[0], jv)
    logs: list[str] = []
    summary: dict = {}
    kept = asyncio.run(gate_tasks(cfg, run, None, logs.append, summary))
    assert run.generated_train[0].id not in {t.id for t in kept.train} and len(kept.train) == 2
    assert summary["override"] is False and summary["used"] == 3
    assert [s["id"] for s in summary["skipped"]] == [run.generated_train[0].id]
    assert any("skipping" in ln and "solution_passes" in ln for ln in logs)
    _reject(own, jv)
    with pytest.raises(TaskError, match="task wc is not admitted \\(solution_passes"):
        asyncio.run(gate_tasks(cfg, collect_tasks(cfg, lambda s: None), None, logs.append))
    allowed = cfg.model_copy(update={"allow_unadmitted": True})
    assert (
        len(asyncio.run(gate_tasks(allowed, collect_tasks(cfg, lambda s: None), None, logs.append)).train)
        == 3
    )
