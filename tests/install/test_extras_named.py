"""Every ``sparring[EXTRA]`` an error message or docstring tells a user to install is a real extra.

The extras are read from pyproject.toml when the test runs, so extras other changes add count too,
and a message naming one that was renamed or never existed (``sparring[data]``) fails here.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MENTION = re.compile(r"sparring\[([A-Za-z0-9_,\- ]+)\]")


def declared_extras() -> set[str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(data["project"].get("optional-dependencies", {}))


def mentions() -> list[tuple[str, int, str]]:
    """(file, line, extra) for every extra named in a ``sparring[...]`` under src/ and in the README."""
    out: list[tuple[str, int, str]] = []
    files = [*sorted((ROOT / "src").rglob("*.py")), ROOT / "README.md"]
    for f in files:
        if not f.is_file():
            continue
        for n, line in enumerate(f.read_text(errors="replace").splitlines(), 1):
            for m in MENTION.finditer(line):
                out += [(str(f.relative_to(ROOT)), n, x.strip()) for x in m.group(1).split(",") if x.strip()]
    return out


def test_scanner_finds_mentions():
    # Positive control: the scan sees the messages it is meant to check (the parquet export's hint).
    found = {(f, x) for f, _, x in mentions()}
    assert ("src/sparring/store/export.py", "parquet") in found


def test_every_named_extra_exists():
    extras = declared_extras()
    bad = [f"{f}:{n}: sparring[{x}]" for f, n, x in mentions() if x not in extras]
    assert not bad, f"extras named but not declared in pyproject.toml ({sorted(extras)}): {bad}"


def test_requires_python_and_torch_range():
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    rp = SpecifierSet(data["project"]["requires-python"])
    assert all(v in rp for v in ("3.11", "3.12", "3.13")), rp
    for extra, reqs in data["project"]["optional-dependencies"].items():
        for r in map(Requirement, reqs):
            if r.name == "torch":  # a range a CUDA build (e.g. 2.5.1+cu124) satisfies, never an exact pin
                assert not any(s.operator == "==" for s in r.specifier), f"[{extra}] pins torch: {r}"
                assert r.specifier.contains("2.5.1+cu124"), f"[{extra}]: {r} refuses a CUDA build"
