"""Bad training configs fail with one clear line before any work starts (no task, model or sandbox made)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparring.errors import ConfigError
from sparring.train.config import RLConfig, load_config

EXE = Path(sys.executable).parent / "sparring"


def _write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("iterations: 2\nbogus_key: 1\n", "bogus_key: unknown key"),
        ("grpo:\n  lr: 1e-3\n  lr_schedule: cosine\n", "grpo.lr_schedule: unknown key"),
        ("n_train: 4\ntasks_per_iteration: 8\n", "tasks_per_iteration=8 exceeds n_train=4"),
        ("group_size: 1\n", "group_size"),
        ("tasks_per_iteration: 2\ngroup_size: 2\ngrpo: {minibatches: 5}\n", "minibatches=5 exceeds"),
        ("model: {path: /nonexistent/model}\n", "/nonexistent/model is not a model directory"),
        ("grpo: {loss: ppo}\n", "grpo.loss"),
        ("monitor: {exporters: [tensorboard, neptune]}\n", "unknown exporter 'neptune'"),
        ("iterations: 3\ngrpo: {staleness: 3}\n", "staleness=3 >= iterations=3"),
        ("- a\n- b\n", "must be a mapping"),
        ("family: nope\n", "unknown family 'nope'"),
        ("family: code-repiar\n", "did you mean 'code-repair'?"),
        ("n_trian: 3\n", "did you mean 'n_train'?"),
        ("grpo:\n  lrr: 1e-3\n", "grpo.lrr: unknown key (did you mean 'lr'?"),
        ("iterations: 2\ngrpo: {lr 1}\n  n_train: 3\n", "line 3, column 3:"),
    ],
)
def test_bad_config_is_one_clear_error(tmp_path, text, needle):
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, text))
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_unknown_key_lists_the_allowed_ones(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(_write(tmp_path, "curriculum: {solvd: 0.9}\n"))
    assert "solved" in str(e.value) and "retest_p" in str(e.value)


def test_cli_rejects_before_any_work(tmp_path):
    work = tmp_path / "work"
    cfg = _write(tmp_path, f"workdir: {work}\nn_train: 2\ntasks_per_iteration: 3\n")
    r = subprocess.run([str(EXE), "train", "--config", str(cfg)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert "tasks_per_iteration=3 exceeds n_train=2" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not work.exists()  # nothing was generated, built or started
    r = subprocess.run([str(EXE), "train", "--config", str(cfg), "--set", "tasks_per_iteration=1",
                        "--set", "family=nope"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "unknown family 'nope'" in r.stderr
    assert not work.exists()  # checked before the workdir is made
    r = subprocess.run(
        [str(EXE), "train", "--config", str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "config file not found" in r.stderr


def test_resume_without_checkpoint_is_an_error(tmp_path):
    cfg = _write(tmp_path, f"workdir: {tmp_path / 'w'}\n")
    r = subprocess.run(
        [str(EXE), "train", "--config", str(cfg), "--resume"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and "no checkpoint" in r.stderr


def test_a_checkpoint_from_before_a_new_setting_still_resumes():
    """A setting added since a checkpoint was written compares at its default; a changed one does not."""
    from sparring.train.run_state import learning_config

    cfg = RLConfig()
    old = cfg.model_dump(mode="json")
    del old["model"]["max_batch"]  # written before the setting existed
    assert learning_config(old) == learning_config(cfg.model_dump(mode="json"))
    changed = cfg.model_dump(mode="json")
    changed["model"]["max_batch"] = 1
    assert learning_config(changed) != learning_config(cfg.model_dump(mode="json"))
