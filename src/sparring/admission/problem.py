"""One broken admission rule: its name (what ``sparring tasks check`` reports) and why."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Problem:
    rule: str
    detail: str

    def to_json(self) -> dict[str, str]:
        return {"rule": self.rule, "detail": self.detail}
