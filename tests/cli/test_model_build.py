"""`sparring model build`: the tiny model as a directory `serve-policy` and `hf:DIR` load."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXE = Path(sys.executable).parent / "sparring"


def test_model_build_writes_a_loadable_model_once(tmp_path):
    out = tmp_path / "tiny"
    r = subprocess.run([str(EXE), "model", "build", "--out", str(out), "--hidden", "32", "--json"],
                       capture_output=True, text=True, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["path"] == str(out) and d["parameters"] > 0 and d["name"] == "tiny"
    assert (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    assert "Writing model shards" not in r.stderr
    from sparring.policy.hf import HFPolicy

    assert HFPolicy(out, max_new_tokens=4).name == f"hf:{out}"
    again = subprocess.run(
        [str(EXE), "model", "build", "--out", str(out)], capture_output=True, text=True, timeout=120
    )
    assert again.returncode == 2 and "already holds a model" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
