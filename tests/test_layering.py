"""The layering of the rooms (docs/concepts.md), as a test: arrows between rooms point one way.

Every module under ``src/sparring`` is parsed with :mod:`ast` (function-local
imports included, ``TYPE_CHECKING`` blocks too: a type-only import is still a
dependency of the design) and each import of another room is checked against
:data:`ALLOWED`, the explicit table of which room may import which. Concrete
sandbox backends (:data:`CONCRETE_BACKENDS`) may be imported only by the
sandbox room itself and by the CLI, which builds them; everything else takes
the protocols in ``sandbox.base``.

Known violations would be listed in :data:`KNOWN_VIOLATIONS`, each with its
reason; the list is empty and may only shrink: an entry that no longer occurs
fails the test too, so fixing a violation means deleting its entry.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from imports_support import PACKAGE, from_target, module_name, write_tree

SRC = Path(__file__).resolve().parents[1] / "src"

# Modules directly under sparring/ that are shared records or helpers, each its own "room":
# errors (the exception tree), trajectory (the record rollout builds, store keeps, train reads),
# chat_format (the text format policies render and the Environment parses), textsafe (candidate
# text made inert for a reader: the terminal and the HTML pages), pyast (the one thread-safe ast.parse),
# pids (whether an owner process is alive: the image store and the sandbox reaper), filelock (a lock
# file held across processes: the image store, the GGUF model cache, the task registry), atomicfile (a file
# replaced whole: task records, caches, exports, golden sets, the checkpoints' pointer).
ROOT_ROOMS = ("errors", "trajectory", "chat_format", "textsafe", "pyast", "pids", "filelock", "atomicfile")

# room -> the rooms (or single modules, "judge.records") it may import. A room may always import
# itself. Read bottom-up: errors; images; sandbox; tasks; judge; admission; policy; env; rollout; store; ...; cli.
ROLLOUT_ROOMS = frozenset(
    {"errors", "sandbox", "tasks", "judge", "policy", "env", "store", "trajectory", "chat_format"}
)
ALLOWED: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "chat_format": frozenset(),
    "textsafe": frozenset(),
    "pyast": frozenset(),
    "pids": frozenset(),
    "filelock": frozenset(),
    "atomicfile": frozenset(),
    "images": frozenset(
        {"errors", "pids", "filelock"}
    ),  # the image store: below the sandbox, whose roots it makes
    "sandbox": frozenset({"errors", "images", "pids", "atomicfile"}),
    "tasks": frozenset(
        {"errors", "sandbox", "pyast", "images", "filelock", "atomicfile"}
    ),  # protocols only: see CONCRETE_BACKENDS
    "judge": frozenset(
        {"errors", "sandbox", "tasks", "pyast", "atomicfile"}
    ),  # never rollout, policy, train, env, store
    # runs the judge on a task to decide whether it enters the library (check, regress, bench)
    "admission": frozenset({"errors", "sandbox", "tasks", "judge", "atomicfile"}),
    "trajectory": frozenset({"errors", "judge.records"}),  # the judge's verdict record, nothing else
    "policy": frozenset({"errors", "tasks", "chat_format", "trajectory", "filelock"}),  # never judge
    "env": frozenset({"errors", "sandbox", "tasks", "judge", "trajectory", "chat_format"}),  # never policy
    "store": frozenset({"errors", "trajectory", "tasks", "sandbox", "atomicfile"}),  # never rollout
    "curriculum": frozenset({"errors", "tasks", "trajectory"}),
    "monitor": frozenset({"errors", "trajectory", "textsafe"}),
    "rollout": ROLLOUT_ROOMS,  # drives env with a policy
    # the driver resolves a task's image to a digest in its image store; nodes fill theirs by that digest
    "distributed": (ROLLOUT_ROOMS - {"chat_format"}) | {"rollout", "images"},
    # consumes trajectories: everything rollout may use, and the rooms that shape training
    "train": ROLLOUT_ROOMS | {"rollout", "curriculum", "monitor", "distributed", "admission", "atomicfile"},
    "integrations": ROLLOUT_ROOMS | {"rollout"},  # thin adapters over env
    "doctor": frozenset({"errors", "sandbox"}),  # reports the sandbox's own feature detection
    "cli": frozenset({"*"}),  # parses, calls the library, prints
    "": frozenset(),  # sparring/__init__.py
}

# The backends and their sandboxes: the local one's classes and all of sandbox/oci/. The doctor may still build
# the local exec server (sandbox.local.rootfs) as a backend does; the shared parts are sandbox.isolation and
# sandbox.storage, the protocols sandbox.base.
CONCRETE_BACKENDS = ("sandbox.local.backend", "sandbox.local.sandbox", "sandbox.oci")
MAY_BUILD_BACKENDS = frozenset({"sandbox", "cli"})

# (importer module, imported module) -> why it is still here. Shrink only; empty since issue 15.
KNOWN_VIOLATIONS: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Import:
    importer: str  # dotted, without the "sparring." prefix
    imported: str
    line: int


def imports_of(source: str, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """Every sparring module ``source`` imports (dotted, full), anywhere in the file."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = from_target(node, module, is_package)
            yield target, node.lineno
            for alias in node.names:  # `from sparring.judge import hacks` imports a module too
                yield f"{target}.{alias.name}", node.lineno


def collect(src: Path) -> list[Import]:
    out = []
    for path in sorted((src / PACKAGE).rglob("*.py")):
        module = module_name(path, src)
        for target, line in imports_of(path.read_text(), module, path.name == "__init__.py"):
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                out.append(
                    Import(
                        module.removeprefix(PACKAGE).lstrip("."),
                        target.removeprefix(PACKAGE).lstrip("."),
                        line,
                    )
                )
    return out


def room(module: str) -> str:
    return module.split(".")[0]


def _matches(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def violation(imp: Import, known_modules: set[str]) -> str | None:
    """Why ``imp`` breaks the layering, or None. Names that are not modules (``from x import Cls``)
    are checked through the module they come from."""
    if imp.imported not in known_modules and imp.imported.rpartition(".")[0] in known_modules:
        return None  # a name inside a module; that module is checked as its own entry
    src_room, dst_room = room(imp.importer), room(imp.imported)
    if any(_matches(imp.imported, c) for c in CONCRETE_BACKENDS) and src_room not in MAY_BUILD_BACKENDS:
        return f"{imp.importer} imports the concrete backend {imp.imported}; take a SandboxBackend"
    if src_room == dst_room or dst_room == "":
        return None
    allowed = ALLOWED.get(src_room)
    if allowed is None:
        return f"room {src_room!r} has no row in ALLOWED; add one"
    if "*" in allowed or any(_matches(imp.imported, a) for a in allowed):
        return None
    return f"{imp.importer} ({src_room}) imports {imp.imported} ({dst_room}); not in ALLOWED[{src_room!r}]"


def violations(src: Path) -> dict[tuple[str, str], str]:
    found = {}
    modules = {module_name(p, src).removeprefix(PACKAGE).lstrip(".") for p in (src / PACKAGE).rglob("*.py")}
    modules |= {m.rpartition(".")[0] for m in modules}
    for imp in collect(src):
        why = violation(imp, modules)
        if why is not None:
            found.setdefault((imp.importer, imp.imported), f"{why} (line {imp.line})")
    return found


def test_every_room_has_a_row_in_the_table() -> None:
    rooms = {
        room(module_name(p, SRC).removeprefix(PACKAGE).lstrip(".")) for p in (SRC / PACKAGE).rglob("*.py")
    }
    assert rooms <= set(ALLOWED), f"rooms without a layering rule: {sorted(rooms - set(ALLOWED))}"


def test_imports_follow_the_layering() -> None:
    found = violations(SRC)
    new = {k: v for k, v in found.items() if k not in KNOWN_VIOLATIONS}
    assert not new, "imports against the layering's arrows:\n" + "\n".join(sorted(new.values()))


def test_known_violations_only_shrink() -> None:
    found = violations(SRC)
    fixed = sorted(k for k in KNOWN_VIOLATIONS if k not in found)
    assert not fixed, f"fixed, so delete from KNOWN_VIOLATIONS: {fixed}"


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        # judge importing rollout, inside a function (lazy imports count)
        ({"judge/x.py": "def f():\n    from sparring.rollout import episode\n", "rollout/episode.py": ""},
         ("judge.x", "rollout.episode")),
        # policy importing judge through a relative import
        ({"policy/x.py": "from ..judge import base\n", "judge/base.py": ""}, ("policy.x", "judge.base")),
        # tasks importing a concrete backend, `import` form
        ({"tasks/x.py": "import sparring.sandbox.local.backend\n", "sandbox/local/backend.py": ""},
         ("tasks.x", "sandbox.local.backend")),
        # env importing policy under TYPE_CHECKING
        ({"env/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sparring.policy.base import P\n",
          "policy/base.py": ""}, ("env.x", "policy.base")),
    ],
)  # fmt: skip
def test_a_forbidden_import_is_reported(
    tmp_path: Path, files: dict[str, str], expected: tuple[str, str]
) -> None:
    found = violations(write_tree(tmp_path, files))
    assert expected in found, found


def test_allowed_imports_are_not_reported(tmp_path: Path) -> None:
    files = {
        "rollout/x.py": "from sparring.judge.base import Judge\nfrom sparring.env import Environment\n",
        "tasks/x.py": "from sparring.sandbox.base import WorkspaceDiff\n",
        "trajectory.py": "from sparring.judge.records import TestCounts\n",
        "judge/base.py": "",
        "judge/records.py": "",
        "env/__init__.py": "",
        "sandbox/base.py": "",
    }
    assert violations(write_tree(tmp_path, files)) == {}


# ---------- inside the sandbox room: its parts, bottom-up (issue 34) ----------
# part -> the parts it may import (lazy and TYPE_CHECKING imports count, as above). A part is a sub-package
# (storage, isolation, local, oci) or a top-level module; "" is sandbox/__init__.py. Feature detection and
# every other shared piece is in isolation or storage, which never import a backend; only config (which
# builds backends from a config) and bench import the backends.
_RECORDS = frozenset({"base", "environment", "crashpoint"})
SANDBOX_PARTS: dict[str, frozenset[str]] = {
    "": frozenset({"base"}),
    "base": frozenset(),
    "environment": frozenset(),
    "crashpoint": frozenset(),
    "storage": frozenset({"base"}),
    "isolation": _RECORDS | {"storage"},
    "local": _RECORDS | {"isolation", "storage"},
    "oci": _RECORDS | {"isolation", "storage"},
    "pool": frozenset({"base"}),
    "config": frozenset({"base", "local", "oci"}),
    "bench": _RECORDS | {"isolation", "storage", "local", "oci", "pool"},
}


def sandbox_part(module: str) -> str:
    """``sandbox.isolation.cgroups`` -> ``isolation``; ``sandbox.base`` -> ``base``; ``sandbox`` -> ``""``."""
    return module.split(".")[1] if "." in module else ""


def sandbox_part_violations(src: Path) -> dict[tuple[str, str], str]:
    found = {}
    for imp in collect(src):
        if room(imp.importer) != "sandbox" or room(imp.imported) != "sandbox":
            continue
        have, want = sandbox_part(imp.importer), sandbox_part(imp.imported)
        if have == want:
            continue
        allowed = SANDBOX_PARTS.get(have)
        if allowed is None:
            found[(imp.importer, imp.imported)] = (
                f"sandbox part {have!r} has no row in SANDBOX_PARTS; add one"
            )
        elif want not in allowed:
            found[(imp.importer, imp.imported)] = (
                f"{imp.importer} imports {imp.imported} (line {imp.line}): sandbox part {have!r} may not import {want!r}"
            )
    return found


def test_sandbox_parts_import_only_downwards() -> None:
    found = sandbox_part_violations(SRC)
    assert not found, "imports against the sandbox's parts:\n" + "\n".join(sorted(found.values()))


def test_a_shared_part_importing_a_backend_is_reported(tmp_path: Path) -> None:
    files = {  # feature detection asking the OCI backend, inside a function (the cycle issue 34 removed)
        "sandbox/isolation/features.py": "def f():\n    from sparring.sandbox.oci.image import podman_argv\n",
        "sandbox/oci/image.py": "from sparring.sandbox.isolation import features\n",
        "sandbox/storage/layers.py": "from sparring.sandbox.base import Spec\n",
        "sandbox/base.py": "",
    }
    found = sandbox_part_violations(write_tree(tmp_path, files))
    assert ("sandbox.isolation.features", "sandbox.oci.image") in found, found
    assert {importer for importer, _ in found} == {"sandbox.isolation.features"}, (
        found
    )  # image -> features is fine
