"""Imports from the workspace during judging: source only. It runs INSIDE the judge's sandbox.

Used by the launcher and the dynamic-test driver before the workspace goes on
``sys.path``. The judge imports only what it can read: Python source files. An
extension module, a sourceless ``.pyc`` or a crafted ``__pycache__`` entry next
to (or instead of) a ``.py`` file is never loaded from the workspace, whatever
the diff contained: workspace directories get a finder with a source loader
only, and that loader never reads (or writes) cached bytecode. Everything
outside the workspace (the standard library, pytest) keeps its bytecode cache,
so judging costs no recompilation of the interpreter's own modules.
Only the standard library may be imported here.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import SOURCE_SUFFIXES, FileFinder, SourceFileLoader
from typing import Any


class SourceOnlyLoader(SourceFileLoader):
    """Compiles the source every time: without the source's stats, ``get_code`` neither reads a cached
    ``.pyc`` (whose validity a candidate could fake) nor writes one."""

    def path_stats(self, path: str) -> Any:
        raise OSError("the judge reads no cached bytecode from the workspace")


def source_only(workspace: str, allow_binary: bool = False) -> None:
    """Make every directory under ``workspace`` import Python source only."""
    if allow_binary:
        return
    workspace = os.path.abspath(workspace)

    def hook(path: str) -> Any:
        full = os.path.abspath(path or ".")
        if full == workspace or full.startswith(workspace + os.sep):
            return FileFinder(full, (SourceOnlyLoader, SOURCE_SUFFIXES))
        raise ImportError("not a workspace path")

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()
