"""`judge regress` as library functions: which flags go together, and reading the golden file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sparring.errors import ConfigError
from sparring.judge.directory import symlinks_in
from sparring.judge.quality.golden import golden_path
from sparring.judge.quality.regress import RegressOptions, load_golden


@pytest.mark.parametrize(
    ("opts", "message"),
    [
        (RegressOptions(only_labelled=True), "--only-labelled needs --labelled"),
        (RegressOptions(only_labelled=True, labelled=Path("l.json"), update=True), "cannot be combined"),
        (RegressOptions(update=True, rebuild=True), "pass one"),
    ],
)
def test_flags_that_cannot_go_together(opts: RegressOptions, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        opts.check()


def test_flags_that_go_together() -> None:
    for opts in (RegressOptions(), RegressOptions(update=True), RegressOptions(rebuild=True),
                 RegressOptions(labelled=Path("l.json"), only_labelled=True)):  # fmt: skip
        opts.check()
    assert RegressOptions(update=True).writes and RegressOptions(rebuild=True).writes
    assert not RegressOptions().writes


def test_the_golden_file_is_read_or_refused_in_one_line(tmp_path: Path) -> None:
    assert load_golden(golden_path())["cases"]
    with pytest.raises(ConfigError, match="not found .*--rebuild"):
        load_golden(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="is not JSON"):
        load_golden(bad)


def test_symlinks_are_listed_not_followed(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f.py").write_text("x = 1\n")
    os.symlink("/etc/passwd", tmp_path / "d" / "leak")
    os.symlink(tmp_path / "d", tmp_path / "loop")  # a link to a directory is listed, never walked
    assert symlinks_in(tmp_path) == ["d/leak", "loop"]
