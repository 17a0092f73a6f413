"""The judge version: a name plus a hash of the code and config that decide scores.

Any change to a module listed in :data:`SCORING_MODULES` or to the judge config
changes the version, so a judge change that could move scores always comes with
a new version, and every trajectory records the version that scored it.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from typing import Any

BASE = "pytest-judge/3"
SCORING_MODULES = (
    "pytest_judge.py",
    "sandbox_runner.py",
    "sandbox_pytest.py",
    "sandbox_driver.py",
    "sandbox_observe.py",
    "sandbox_imports.py",
    "probe.py",
    "withheld.py",
    "report.py",
    "reward.py",
    "hacks.py",
    "aliases.py",
    "importable.py",
    "static.py",
    "dynamic.py",
    "mutation.py",
)


def code_digest() -> str:
    h = hashlib.sha256()
    pkg = resources.files("sparring.judge")
    for name in SCORING_MODULES:
        h.update(name.encode() + b"\0" + pkg.joinpath(name).read_bytes() + b"\0")
    return h.hexdigest()


def environment() -> dict[str, str]:
    """What outside the judge's code can move a score: the interpreter, pytest, whether ruff is there."""
    import sys
    from importlib.metadata import PackageNotFoundError, version

    from sparring.judge.static import ruff_exe

    try:
        pytest_version = version("pytest")
    except PackageNotFoundError:
        pytest_version = "absent"
    return {"python": ".".join(map(str, sys.version_info[:3])), "pytest": pytest_version,
            "ruff": "present" if ruff_exe() else "absent"}  # fmt: skip


def judge_version(config: dict[str, Any]) -> str:
    """``pytest-judge/2+<12 hex>`` over the scoring code, ``config`` and :func:`environment`."""
    h = hashlib.sha256(code_digest().encode())
    h.update(json.dumps(config, sort_keys=True).encode())
    h.update(json.dumps(environment(), sort_keys=True).encode())
    return f"{BASE}+{h.hexdigest()[:12]}"
