"""The base library of the code-repair family: small real packages kept as data.

Each submodule defines one ``BASE``: a tiny multi-file pure-Python package (its
files as source strings) and a thorough pytest suite that passes on it. The
code-repair generator injects one bug into a base's code and asks the agent to
find it; the suite is the judge. Bases are plain strings rather than importable
modules so that they never run inside Sparring, install with the wheel like any
other module, and cannot be confused with Sparring's own code.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

#: Submodule names of the bases, in the order the generator enumerates them.
BASE_MODULES: tuple[str, ...] = (
    "statkit",
    "spans",
    "runlength",
    "numerals",
    "minimat",
    "cachebox",
    "wordwrap",
    "durations",
    "ledger",
    "searchkit",
    "jpath",
    "pqueue",
)


@dataclass(frozen=True)
class BaseSource:
    """One base package and its test suite.

    ``files`` maps paths relative to the workspace root (``<pkg>/...py``) to
    source text; ``tests`` is the full suite, importing ``<pkg>`` as a
    top-level package; ``module`` names the main module (the suite's files are
    ``test_<module>.py`` / ``test_hidden_<module>.py``).
    """

    name: str
    module: str
    summary: str
    files: dict[str, str] = field(repr=False)
    tests: str = field(repr=False)


def load_bases() -> list[BaseSource]:
    """Every base, in :data:`BASE_MODULES` order."""
    bases: list[BaseSource] = []
    for name in BASE_MODULES:
        mod = importlib.import_module(f"{__name__}.{name}")
        base = mod.BASE
        if not isinstance(base, BaseSource) or base.name != name:
            raise TypeError(f"{mod.__name__}.BASE must be a BaseSource named {name!r}")
        bases.append(base)
    return bases
