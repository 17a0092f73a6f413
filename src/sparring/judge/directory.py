"""Judging a workspace directory as left on disk: its diff against the task's initial state.

``sparring judge score`` and the Python API share this. Symbolic links in the
directory are not followed into the diff (a link could point anywhere on the
host); the result says so with the ``symlinks_ignored`` flag and how many there
were, so a workspace that relied on one is not silently judged as something else.
"""

from __future__ import annotations

import os
from pathlib import Path

from sparring.judge.base import Judge, JudgeResult
from sparring.sandbox.storage.workspace import tree_diff
from sparring.tasks.loader import Task


def symlinks_in(root: Path) -> list[str]:
    """Every symbolic link under ``root`` (posix paths relative to it), sorted; links are not followed."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            if p.is_symlink():
                out.append(p.relative_to(root).as_posix())
    return sorted(out)


async def score_directory(judge: Judge, task: Task, workspace: Path) -> JudgeResult:
    """``judge``'s verdict on the final workspace ``workspace`` of ``task`` (a JudgeRunError is the
    judge's own fault and propagates); symlinks in it are flagged ``symlinks_ignored``."""
    links = symlinks_in(workspace)
    res = await judge.score(task, tree_diff(task.workspace, workspace))
    if links:
        res.flags = sorted({*res.flags, "symlinks_ignored"})
        res.metrics["symlinks_ignored"] = float(len(links))
    return res
