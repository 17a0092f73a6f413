"""The documentation site builds strictly, refers to nothing outside the repository, and every shell
command in it is run by a test.

`mkdocs build --strict` (mkdocs.yml at the root, pages under docs/, the `docs` extra) fails on a broken
link, a missing page, an unresolvable API reference or a CLI command whose help cannot be rendered.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.cli.demo import QUICK_TIME
from test_readme import DOC_PAGES, SHELL_FENCES

ROOT = Path(__file__).resolve().parent.parent

# Pages whose shell blocks a test of their own runs word for word.
RUN_ELSEWHERE = {"docs/tutorial-own-task.md": "tests/test_tutorial_own_task.py"}

# Names of files that live beside the repository, never in it: nothing here may point at them.
OUTSIDE = ("DESIGN" + ".md", "STYLE" + ".md", "../" + "shared", "shared design folder")


def _pages() -> list[Path]:
    return sorted((ROOT / "docs").rglob("*.md"))


@pytest.mark.timeout(600)
def test_the_site_builds_strictly(tmp_path):
    site = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                       cwd=ROOT, capture_output=True, text=True, timeout=580,
                       env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})  # fmt: skip
    assert r.returncode == 0, r.stderr[-4000:]
    cli = (site / "cli" / "index.html").read_text()
    for command in ("sparring tasks new", "sparring tasks generate", "sparring serve-env", "sparring train"):
        assert command in cli, command  # generated from the commands themselves
    assert "code-repair, data-analysis" in cli  # `tasks generate --help` lists the families
    api = (site / "api" / "index.html").read_text()
    assert "sparring.env.Environment" in api and "areset" in api  # from the docstrings


def test_nothing_refers_to_files_outside_the_repository():
    files = [ROOT / "README.md", ROOT / "mkdocs.yml", *_pages(), *(ROOT / "src").rglob("*.py"),
             *(p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_docs.py")]  # fmt: skip
    hits = [f"{p.relative_to(ROOT)}: {needle}" for p in files for needle in OUTSIDE
            if needle in p.read_text(encoding="utf-8", errors="replace")]  # fmt: skip
    assert not hits, hits


def _fences(text: str) -> list[tuple[int, str]]:
    """(line, language) of every opening fence."""
    out, inside = [], False
    for i, line in enumerate(text.splitlines(), 1):
        m = re.match(r"^\s*```+\s*([\w+-]*)", line)
        if m:
            if not inside:
                out.append((i, m.group(1).lower()))
            inside = not inside
    return out


def test_every_shell_block_in_the_docs_is_run_by_a_test():
    """A shell block (a fence saying bash/sh/shell/console, or nothing) is run by tests/test_readme.py
    (DOC_PAGES) or by the page's own test (RUN_ELSEWHERE); any other page writes its commands as text."""
    run = set(DOC_PAGES) | set(RUN_ELSEWHERE)
    for rel in RUN_ELSEWHERE.values():
        assert (ROOT / rel).is_file(), rel
    bad = []
    for page in _pages():
        rel = page.relative_to(ROOT).as_posix()
        for line, lang in _fences(page.read_text()):
            if lang in SHELL_FENCES and rel not in run:
                bad.append(f"{rel}:{line}: ```{lang} (run it in a test, or fence it as ```text)")
    assert not bad, bad


def test_the_demo_quick_time_is_said_once_the_same_way():
    texts = {p.relative_to(ROOT).as_posix(): p.read_text() for p in [ROOT / "README.md", *_pages()]}
    assert not [k for k, t in texts.items() if "under 3 minutes" in t]
    assert QUICK_TIME in texts["docs/training.md"]
