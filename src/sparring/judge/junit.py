"""Parse pytest's JUnit XML report into test-id -> outcome."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path


def node_id(classname: str, name: str) -> str:
    """``test_mod.TestCls`` + ``test_x`` -> ``test_mod.py::TestCls::test_x`` (tests at the top of hidden/)."""
    parts = classname.split(".") if classname else []
    # Nested directories appear as dotted prefixes; the first part that is a test module ends the path.
    for i, p in enumerate(parts):
        if p.startswith("test") or p.endswith("_test"):
            mod = "/".join(parts[: i + 1]) + ".py"
            return "::".join([mod, *parts[i + 1 :], name])
    return "::".join([("/".join(parts) + ".py") if parts else "", name])


def parse_junit(path: Path) -> dict[str, str]:
    """Outcome per test: passed, failed, error or skipped. Raises ValueError on a malformed report."""
    root = ET.parse(path).getroot()
    out: dict[str, str] = {}
    for case in root.iter("testcase"):
        tid = node_id(case.get("classname", ""), case.get("name", ""))
        tags = {child.tag for child in case}
        if "error" in tags:
            out[tid] = "error"
        elif "failure" in tags:
            out[tid] = "failed"
        elif "skipped" in tags:
            out[tid] = "skipped"
        else:
            out[tid] = "passed"
    return out
