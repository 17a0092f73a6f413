"""`sparring model import FILE.gguf --out DIR`: a GGUF file as a normal model folder; `hf:PATH#FORMAT` errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.errors import ConfigError
from sparring.policy.spec import SamplingOptions, make_policy

EXE = Path(sys.executable).parent / "sparring"


def test_a_file_that_is_not_gguf_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"PK\x03\x04 not a gguf file")
    r = subprocess.run([str(EXE), "model", "import", str(bad), "--out", str(tmp_path / "m")],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    assert r.returncode == 2 and "is not a GGUF file" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "m").exists()


def test_policy_spec_errors_name_the_spelling(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown tool-call format 'chatml' \(write hf:PATH#FORMAT"):
        make_policy(f"hf:{tmp_path}#chatml")
    with pytest.raises(ConfigError, match="nor a .gguf file"):
        make_policy(f"hf:{tmp_path}/missing")
    with pytest.raises(ConfigError, match="--temperature: sampling settings apply to hf: and openai:"):
        SamplingOptions(temperature=0.5).for_spec("oracle")
    assert SamplingOptions(max_new_tokens=8, top_p=0.9).for_spec("openai:http://x/v1#m") == {
        "max_tokens": 8, "extra_body": {"top_p": 0.9}}  # fmt: skip


@pytest.mark.slow
def test_model_import_writes_a_loadable_model_folder(smollm2_dir, tmp_path):
    from sparring.policy.gguf import smollm2_gguf

    gguf = smollm2_gguf()
    out = tmp_path / "smol"
    r = subprocess.run([str(EXE), "model", "import", str(gguf), "--out", str(out), "--json"],
                       capture_output=True, text=True, timeout=900)  # fmt: skip
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["path"] == str(out) and 130_000_000 < d["parameters"] < 140_000_000
    record = json.loads((out / "sparring_import.json").read_text())
    assert record["format"] == "gguf" and len(record["sha256"]) == 64
    assert (out / "config.json").read_text() == (smollm2_dir / "config.json").read_text()
    again = subprocess.run([str(EXE), "model", "import", str(gguf), "--out", str(out)],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert again.returncode == 2 and "already holds a model" in again.stderr


def test_the_real_model_recipe_config_validates(tmp_path):
    from sparring.train.config import load_config

    root = Path(__file__).resolve().parents[2]
    model = tmp_path / "smollm2"
    model.mkdir()
    (model / "config.json").write_text("{}")
    cfg = load_config(
        root / "configs/smollm2-shell-ops.yaml", [f"model.path={model}", "model.tool_format=hermes"]
    )
    assert (
        cfg.model.lora is not None and cfg.model.turn_timeout_s == 600 and cfg.model.tool_format == "hermes"
    )
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")  # a .gguf file is accepted as model.path too (converted when the run starts)
    assert load_config(root / "configs/smollm2-shell-ops.yaml", [f"model.path={gguf}"]).model.path == gguf
