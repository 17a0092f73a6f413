"""docs/tutorial-own-task.md, word for word: every shell block, in order, in one bash process, in a scratch
directory (issue 35). It writes a task by hand, pins, admits, rolls out, trains on it and opens the report,
with the admission gate on (no override) and a verdict cache of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TUTORIAL = ROOT / "docs" / "tutorial-own-task.md"
BLOCK = re.compile(r"^```bash\n(.*?)^```", re.DOTALL | re.MULTILINE)


def tutorial_script() -> str:
    blocks = BLOCK.findall(TUTORIAL.read_text(encoding="utf-8"))
    assert len(blocks) >= 6, "the tutorial lost its shell blocks"
    return "set -euo pipefail\n" + "\n".join(blocks)


@pytest.mark.slow
def test_tutorial_runs_word_for_word(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SPARRING_ALLOW_UNADMITTED", "COLUMNS")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["SPARRING_ADMISSION_CACHE"] = str(tmp_path / "admission-cache")
    work = tmp_path / "work"
    work.mkdir()
    r = subprocess.run(["bash", "-c", tutorial_script()], cwd=work, env=env, capture_output=True, text=True,
                       timeout=1800)  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    assert "wordcount: pinned sha256:" in r.stdout  # pin says what changed
    assert "ok wordcount" in r.stdout  # admitted as written
    assert (work / "my-tasks" / "wordcount" / "admission.json").is_file()
    assert list((work / "runs" / "mine" / "reports").glob("*/index.html"))
    assert (work / "runs" / "mine" / "checkpoints" / "latest").exists()


def test_tutorial_task_is_the_tasks_new_example():
    """`tasks new` writes the tutorial's task: the same workspace code, hidden tests and spec text."""
    from sparring.tasks import template

    text = TUTORIAL.read_text(encoding="utf-8")
    assert template.INSTRUCTION in text and template.SUCCESS in text
    assert 'WORD = re.compile(r"[a-z\']+")' in text and "WORD.findall(text)" in template.BUGGY
