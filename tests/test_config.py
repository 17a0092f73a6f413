"""RL configs load from YAML / TOML and take dotted command-line overrides."""

from __future__ import annotations

import pytest

from sparring.errors import ConfigError
from sparring.train.config import load_config


def test_yaml_toml_and_overrides(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("iterations: 7\ngrpo:\n  lr: 0.01\n")
    c = load_config(y, ["group_size=8", "model.hidden=32"])
    assert (c.iterations, c.group_size, c.model.hidden, c.grpo.lr) == (7, 8, 32, 0.01)
    t = tmp_path / "c.toml"
    t.write_text("iterations = 2\n[model]\nlayers = 3\n")
    c = load_config(t)
    assert (c.iterations, c.model.layers) == (2, 3)


@pytest.mark.parametrize(
    "text,overrides,needle",
    [
        ("iterations: [1\n", [], "malformed"),
        ("- 1\n", [], "mapping"),
        ("iterations: -1\n", [], "iterations"),
        ("bogus: 1\n", [], "bogus"),
        ("", ["novalue"], "key.path=value"),
    ],
)
def test_bad_configs_are_one_line_errors(tmp_path, text, overrides, needle):
    f = tmp_path / "c.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=needle):
        load_config(f, overrides)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "none.yaml")
