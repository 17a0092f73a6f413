"""Terminal output that candidate text cannot drive: control characters are shown, never obeyed.

Trajectories, tool outputs, file names and error texts printed by the CLI were written by the
candidate. A terminal obeys escape sequences wherever they come from: ``ESC]52`` writes the
reviewer's clipboard, ``ESC[1A ESC[2K`` erases the flags line above, ``ESC[8m`` hides text,
``ESC]0`` retitles the window. Rich escapes its *markup* but passes ESC and C1 bytes through
(it strips only BEL, BS, VT, FF and CR). :class:`InertConsole` neutralises every text segment
at the one place all output is rendered, so no command can forget it; rich's own styles and
cursor moves are control segments or style attributes, never segment text, and are kept.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

# C0 but newline and tab, DEL, C1 (0x9b is an 8-bit CSI), and the bidi embeddings, overrides and
# isolates that reorder what a reviewer reads ("Trojan Source").
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _shown(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def inert(text: str) -> str:
    """``text`` with every control character a terminal would obey written out as ``\\xNN`` / ``\\uNNNN``."""
    return _CONTROL.sub(_shown, text)


class InertConsole(Console):
    """A rich Console whose rendered text can carry no control character (see the module doc)."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control or not _CONTROL.search(seg.text):
                yield seg
            else:
                yield Segment(inert(seg.text), seg.style, None)
