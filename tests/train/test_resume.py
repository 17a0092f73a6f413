"""Kill training mid-run, resume, and reach the same state as an uninterrupted run.

Real processes: `sparring train` is SIGKILLed right after its first checkpoint
lands, then `sparring train --resume` finishes the run. Weights, optimizer-driven
updates, curriculum posteriors and RNG, and the per-iteration results must equal
those of a run that was never interrupted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

EXE = Path(sys.executable).parent / "sparring"

CONFIG = """
family: shell-ops
n_train: 4
n_heldout: 1
heldout_samples: 1
seed: 3
sft_steps: 100
sft_batch: 16
sft_lr: 3.0e-3
iterations: 3
tasks_per_iteration: 2
group_size: 4
max_steps: 3
heldout_max_steps: 3
resample_rounds: 1
checkpoint_every: 1
eval_every: 1
model: {max_new_tokens: 40, max_batch: 1}
warm_start: {teacher: noisy, epsilon: 0.15, forget_output: 0.5, samples: 2, passed_only: false}
grpo: {lr: 5.0e-4, minibatches: 2, kl_coef: 0.05}
"""
# Enough warm start for rewards that differ within a group, so every iteration runs a real GRPO update
# (asserted below: a run whose updates are all skipped would resume to equal weights trivially);
# model.max_batch 1 samples each turn alone, so the seed pins the tokens whatever the sandbox timing.
# eval_every 1: a held-out evaluation after iterations 1 and 2 as well, before each checkpoint, so the
# resumed run's held-out curve must hold the one evaluated before the kill.


def _cfg(tmp_path: Path, name: str) -> Path:
    p = tmp_path / f"{name}.yaml"
    p.write_text(CONFIG + f"workdir: {tmp_path / name}\n")
    return p


def _final(workdir: Path) -> tuple[dict, dict]:
    from safetensors.torch import load_file

    ck = workdir / "checkpoints" / (workdir / "checkpoints" / "latest").read_text().strip()
    state = json.loads((ck / "state.json").read_text())
    weights = {}
    for f in sorted((ck / "model").glob("*.safetensors")):
        weights.update(load_file(str(f)))
    return state, weights


def _run_rollouts(workdir: Path) -> int:
    """Trajectories of the training run itself (not its held-out evaluations) in the workdir's store."""
    import sqlite3

    db = workdir / "store.db"
    if not db.exists():
        return 0
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return int(
            conn.execute("SELECT count(*) FROM trajectories WHERE run_id NOT LIKE '%-heldout-%'").fetchone()[
                0
            ]
        )


@pytest.mark.slow
def test_kill_and_resume_reaches_the_uninterrupted_state(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    a = subprocess.run([str(EXE), "train", "--config", str(_cfg(tmp_path, "a")), "--json"],
                       capture_output=True, text=True, timeout=900, env=env)  # fmt: skip
    assert a.returncode == 0, a.stderr[-2000:]

    cfg_b = _cfg(tmp_path, "b")
    proc = subprocess.Popen([str(EXE), "train", "--config", str(cfg_b)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=env, start_new_session=True)  # fmt: skip
    latest = tmp_path / "b" / "checkpoints" / "latest"
    deadline = time.monotonic() + 900
    while not latest.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert proc.poll() is None, "the run ended before it could be killed"
    # let iteration 1 store a rollout or more first: the kill interrupts an iteration half-sampled
    at_ckpt = _run_rollouts(tmp_path / "b")
    while _run_rollouts(tmp_path / "b") == at_ckpt and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the whole process group: sandboxes' helpers too
    proc.wait()
    assert latest.read_text().strip() == "iter-00000"

    b = subprocess.run([str(EXE), "train", "--config", str(cfg_b), "--resume", "--json"],
                       capture_output=True, text=True, timeout=900, env=env)  # fmt: skip
    assert b.returncode == 0, b.stderr[-2000:]
    ra, rb = json.loads(a.stdout), json.loads(b.stdout)
    assert rb["trained_model"] == str(tmp_path / "b" / "checkpoints" / "iter-00002" / "model")
    assert "trained model: " + rb["trained_model"] in b.stderr
    assert [r["iteration"] for r in rb["iterations"]] == [0, 1, 2]
    assert sum(not r["grpo_skipped"] for r in ra["iterations"]) >= 2, ra["iterations"]  # real updates ran

    sa, wa = _final(tmp_path / "a")
    sb, wb = _final(tmp_path / "b")
    assert sa["iteration"] == sb["iteration"] == 2
    assert sa["policy_version"] == sb["policy_version"] > 0
    assert set(wa) == set(wb)
    for k in wa:
        assert (wa[k] == wb[k]).all(), f"weights differ after resume: {k}"
    assert sa["curriculum"] == sb["curriculum"]
    assert sa["drift"] == sb["drift"]

    def strip(rows):
        timing = ("seconds", "throughput_per_min", "update_s", "trainer_idle_s", "weight_sync_s")
        return [{k: v for k, v in r.items() if k not in timing} for r in rows]

    assert strip(ra["iterations"]) == strip(rb["iterations"])
    assert ra["heldout"] == rb["heldout"]
    assert ra["heldout_curve"] == rb["heldout_curve"]
    calls = [r["sampled_tool_calls"] for r in ra["iterations"]]
    assert [(p["iteration"], p["sampled_tool_calls"]) for p in ra["heldout_curve"]] == [
        (0, 0),
        (1, calls[0]),
        (2, calls[0] + calls[1]),
        (3, sum(calls)),
    ] and calls[0] > 0
    assert ra["heldout_curve"][-1]["pass_rate"] == ra["heldout"]["after_rl"]
    # the interrupted iteration's rollouts were dropped and redone, not counted twice
    assert _run_rollouts(tmp_path / "b") == _run_rollouts(tmp_path / "a") > 0
