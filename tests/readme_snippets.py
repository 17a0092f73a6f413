"""The documentation's code snippets by name, so tests execute exactly what users copy (and the
snippets cannot rot).

A snippet is a fenced ``python`` block directly preceded by an HTML comment
``<!-- snippet: NAME -->`` in README.md or a page under docs/.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
_SNIPPET_RE = re.compile(r"<!-- snippet: ([\w.-]+) -->\s*```python\n(.*?)```", re.DOTALL)


def snippets() -> dict[str, str]:
    found: dict[str, str] = {}
    for page in [README, *sorted((ROOT / "docs").rglob("*.md"))]:
        found.update(_SNIPPET_RE.findall(page.read_text(encoding="utf-8")))
    return found


def snippet(name: str) -> str:
    found = snippets()
    assert name in found, f"neither README.md nor docs/ has a snippet {name!r} (known: {sorted(found)})"
    return found[name]
