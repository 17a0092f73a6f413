"""Imports from the workspace during judging: source only. It runs INSIDE the judge's sandbox.

Used by the launcher and the dynamic-test driver before the workspace goes on
``sys.path``. The judge imports only what it can read: Python source files. An
extension module, a sourceless ``.pyc`` or a crafted ``__pycache__`` entry next
to (or instead of) a ``.py`` file is never loaded from the workspace, whatever
the diff contained: workspace directories get a finder with a source loader
only, and that loader never reads (or writes) cached bytecode. Everything
outside the workspace (the standard library, pytest) keeps its bytecode cache,
so judging costs no recompilation of the interpreter's own modules.

Workspace modules serve the candidate's own code and the judge's tests, never the
tests' dependencies (:class:`WorkspaceGate`): the workspace is *appended* to
``sys.path``, so an optional import that a library tries and survives without
(openpyxl's ``lxml``, ``numpy``, ``PIL``, ``defusedxml``) used to fall through to
a workspace package of that name and run the candidate's code inside the judge's
process, before any test imported the candidate's code and in families whose
tests never do. The gate refuses a top-level module found in the workspace when
the code importing it is not the workspace's, the tests' or the judge's own
launcher/driver, and refuses a workspace module that would shadow one of the
same name outside the workspace (the outside one is imported instead). Each
refusal is reported (flag ``import_shadowing``, reward 0).
Only the standard library may be imported here.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.machinery import SOURCE_SUFFIXES, FileFinder, ModuleSpec, PathFinder, SourceFileLoader
from typing import Any

FLAG = "import_shadowing"
# Import helpers that import a module named by their caller: the caller is the importer, not the helper.
_HELPERS = frozenset({("importlib/__init__.py", "import_module"), ("_pytest/outcomes.py", "importorskip"),
                      ("importlib/util.py", "find_spec"), ("runpy.py", "_get_module_details"),
                      ("runpy.py", "run_module"), ("unittest/mock.py", "_importer"),
                      ("unittest/mock.py", "_dot_lookup"), ("pkgutil.py", "resolve_name")})  # fmt: skip


class SourceOnlyLoader(SourceFileLoader):
    """Compiles the source every time: without the source's stats, ``get_code`` neither reads a cached
    ``.pyc`` (whose validity a candidate could fake) nor writes one."""

    def path_stats(self, path: str) -> Any:
        raise OSError("the judge reads no cached bytecode from the workspace")


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r + os.sep) for r in roots)


def source_only(workspace: str, allow_binary: bool = False, aliases: Sequence[str] = ()) -> None:
    """Make every directory under ``workspace`` (and each path the image shows it at) import Python source only."""
    if allow_binary:
        return
    roots = [os.path.abspath(r) for r in (workspace, *aliases)]

    def hook(path: str) -> Any:
        full = os.path.abspath(path or ".")
        if _under(full, roots):
            return FileFinder(full, (SourceOnlyLoader, SOURCE_SUFFIXES))
        raise ImportError("not a workspace path")

    sys.path_hooks.insert(0, hook)
    sys.path_importer_cache.clear()


class StartGuard:
    """A meta path finder, first on ``sys.meta_path`` from interpreter start until the job's gate replaces it:
    no module under the candidate's roots is imported, whoever asks.

    The launcher and the driver start with ``-S`` and run the interpreter's site set-up themselves behind
    this guard (:func:`start_site`): a task whose image puts the workspace's own path on ``sys.path`` (an
    editable install's ``.pth`` naming ``/testbed``) would otherwise run a candidate's ``sitecustomize.py``,
    or a module named in a ``.pth`` line or imported by pytest at its start, before the judge says
    ``start`` (so a crash there would read as the judge's fault)."""

    def __init__(self, roots: Sequence[str]) -> None:
        self.roots = [os.path.abspath(r) for r in roots]

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(fullname, path, target) if find is not None else None
            if spec is None:
                continue
            places = [spec.origin] if spec.origin and spec.has_location else []
            places += list(spec.submodule_search_locations or ())
            if any(_under(os.path.abspath(p), self.roots) for p in places):
                raise ModuleNotFoundError(f"No module named {fullname!r} (the candidate's)", name=fullname)
            return spec
        return None


def start_site(roots: Sequence[str]) -> StartGuard:
    """The interpreter's site set-up (site-packages, ``.pth`` files, ``sitecustomize``) behind a
    :class:`StartGuard` for ``roots``, which stays first on ``sys.meta_path`` until :func:`gate`."""
    guard = StartGuard(roots)
    sys.meta_path.insert(0, guard)
    import site

    site.main()
    # first again: a .pth line may have put its own finder before it (setuptools' distutils shim does)
    sys.meta_path[:] = [guard, *(f for f in sys.meta_path if f is not guard)]
    return guard


class WorkspaceGate:
    """A meta path finder, first on ``sys.meta_path``: who may import a top-level module from the workspace.

    It asks the finders after it where ``fullname`` is. A module outside the workspace is returned as
    found. A workspace module is returned only when the code importing it lies under one of ``trusted``
    (the workspace itself, the judge's probes, the launcher's own directory) and no module of that name
    exists outside the workspace; otherwise ``on_refused(name, why)`` runs and the import fails as if the
    module did not exist (or resolves to the one outside). Submodules follow their package's verdict.
    """

    def __init__(
        self,
        workspace: str,
        trusted: Sequence[str],
        on_refused: Callable[[str, str], None],
        aliases: Sequence[str] = (),
    ) -> None:
        self.workspace = os.path.abspath(workspace)
        self.roots = [self.workspace, *(os.path.abspath(a) for a in aliases)]
        self.trusted = tuple(os.path.abspath(t).rstrip(os.sep) + os.sep for t in trusted)
        self.on_refused = on_refused
        self._local = threading.local()

    def _inside(self, path: str | None) -> bool:
        return bool(path) and _under(str(path), self.roots)

    def _from_workspace(self, spec: ModuleSpec) -> bool:
        if spec.origin and spec.has_location:
            return self._inside(spec.origin)
        return any(self._inside(p) for p in spec.submodule_search_locations or ())

    def _found(self, fullname: str, target: Any) -> ModuleSpec | None:
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None) if finder is not self else None
            spec = find(fullname, None, target) if find is not None else None
            if spec is not None:
                return spec
        return None

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        if path is not None or getattr(self._local, "busy", False):
            return None  # a submodule (its package was admitted or refused already), or our own lookup
        self._local.busy = True
        try:
            spec = self._found(fullname, target)
            if spec is None or not self._from_workspace(spec):
                return spec
            outside = [
                p for p in sys.path if isinstance(p, str) and p and not self._inside(os.path.abspath(p))
            ]
            other = PathFinder.find_spec(fullname, outside)
            if fullname in sys.stdlib_module_names or other is not None:
                self.on_refused(fullname, "shadows a module outside the workspace")
                if other is None:  # a stdlib name this interpreter lacks: not the workspace's either
                    raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
                return other
            importer = self._importer()
            if not importer.startswith(self.trusted):
                self.on_refused(fullname, f"imported by {importer or 'unknown code'}")
                raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
            return spec
        finally:
            self._local.busy = False

    @staticmethod
    def _importer() -> str:
        """The file of the code that asked for the import (import machinery and helpers skipped)."""
        f = sys._getframe(2)
        while f is not None:
            code = f.f_code
            name = code.co_filename
            helper = any(name.endswith("/" + file) and code.co_name == fn for file, fn in _HELPERS)
            if not (name.startswith("<frozen importlib") or name == __file__ or helper):
                return name
            f = f.f_back  # type: ignore[assignment]
        return ""


def gate(
    workspace: str,
    trusted: Sequence[str],
    on_refused: Callable[[str, str], None],
    aliases: Sequence[str] = (),
) -> WorkspaceGate:
    """Install a :class:`WorkspaceGate` first on ``sys.meta_path`` (before the workspace joins ``sys.path``),
    in place of the :class:`StartGuard` if one is there. ``aliases``: the other paths the sandbox shows the
    workspace at (an image's ``/testbed``), the candidate's as much as the workspace."""
    g = WorkspaceGate(workspace, [workspace, *aliases, *trusted], on_refused, aliases)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, StartGuard)]
    sys.meta_path.insert(0, g)
    return g
