"""Candidate text made inert for a reader: every control character is written out, never obeyed.

Shared by the two places a person reads what a candidate wrote: the terminal (``cli.inert``, where
ESC and C1 bytes drive the terminal) and the HTML pages (``monitor.site.esc``, where the bidi
embeddings, overrides and isolates reorder what a reviewer reads: "Trojan Source", CVE-2021-42574).
"""

from __future__ import annotations

import re

# C0 but newline and tab, DEL, C1 (0x9b is an 8-bit CSI), and the bidi embeddings, overrides and
# isolates (U+202A-U+202E, U+2066-U+2069) that reorder the text around them.
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def inert(text: str) -> str:
    """``text`` with every control character a reader's display would obey written out as ``\\xNN`` / ``\\uNNNN``."""
    return CONTROL.sub(_shown, text)
