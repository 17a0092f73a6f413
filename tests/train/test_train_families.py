"""`sparring train --set family=...` runs on the families beyond code, unchanged: rollouts, judging,
the store and a GRPO iteration, with a tiny model and tiny budgets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["spreadsheet", "service-recovery"])
def test_train_runs_an_iteration_on_the_family(family: str, tmp_path: Path) -> None:
    sets = {"family": family, "workdir": str(tmp_path / "run"), "n_train": 1, "n_heldout": 1, "iterations": 1,
            "tasks_per_iteration": 1, "group_size": 2, "sft_steps": 0, "max_steps": 2, "heldout_max_steps": 2,
            "model.max_new_tokens": 16}  # fmt: skip
    args = [sys.executable, "-m", "sparring.cli.main", "train", "--config", str(ROOT / "configs/tiny-code-repair.yaml"),
            "--json", *(x for k, v in sets.items() for x in ("--set", f"{k}={v}"))]  # fmt: skip
    r = subprocess.run(args, capture_output=True, text=True, timeout=1500, cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout)
    assert len(out["iterations"]) == 1, out
    assert sum(out["iterations"][0]["statuses"].values()) >= 2, out
