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

from collections.abc import Iterable

from rich.console import Console, ConsoleOptions, RenderableType
from rich.segment import Segment

from sparring.textsafe import CONTROL, inert

__all__ = ["InertConsole", "inert"]


class InertConsole(Console):
    """A rich Console whose rendered text can carry no control character (see the module doc)."""

    def render(self, renderable: RenderableType, options: ConsoleOptions | None = None) -> Iterable[Segment]:
        for seg in super().render(renderable, options):
            if seg.control or not CONTROL.search(seg.text):
                yield seg
            else:
                yield Segment(inert(seg.text), seg.style, None)
