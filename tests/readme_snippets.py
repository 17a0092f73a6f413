"""README's code snippets by name, so tests execute exactly what users copy (and the snippets cannot rot).

A snippet is a fenced ``python`` block directly preceded by an HTML comment
``<!-- snippet: NAME -->`` in README.md.
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"
_SNIPPET_RE = re.compile(r"<!-- snippet: ([\w.-]+) -->\s*```python\n(.*?)```", re.DOTALL)


def snippets() -> dict[str, str]:
    return dict(_SNIPPET_RE.findall(README.read_text(encoding="utf-8")))


def snippet(name: str) -> str:
    found = snippets()
    assert name in found, f"README.md has no snippet {name!r} (known: {sorted(found)})"
    return found[name]
