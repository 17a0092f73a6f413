"""Imports from the workspace during judging: source only. It runs INSIDE the judge's sandbox.

Used by the launcher and the dynamic-test driver before the workspace goes on
``sys.path``. The judge imports only what it can read: Python source files. An
extension module, a sourceless ``.pyc`` or a crafted ``__pycache__`` entry next
to (or instead of) a ``.py`` file is never loaded from the workspace, whatever
the diff contained; bytecode is cached under a private prefix instead.
Only the standard library may be imported here.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def source_only(workspace: str, cache_dir: str, allow_binary: bool = False) -> None:
    """Make every directory under ``workspace`` import Python source only; cache bytecode in ``cache_dir``."""
    from importlib.machinery import SOURCE_SUFFIXES, FileFinder, SourceFileLoader

    workspace = os.path.abspath(workspace)
    sys.pycache_prefix = cache_dir
    os.environ["PYTHONPYCACHEPREFIX"] = cache_dir  # for the tests' own subprocesses
    if allow_binary:
        return

    def hook(path: str) -> Any:
        full = os.path.abspath(path or ".")
        if full == workspace or full.startswith(workspace + os.sep):
            return FileFinder(full, (SourceFileLoader, SOURCE_SUFFIXES))
        raise ImportError("not a workspace path")

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()
