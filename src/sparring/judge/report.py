"""Read the launcher's report lines: what the test process *says* happened.

The launcher (:mod:`sparring.judge.sandbox_pytest`) writes lines
``@@SPARRING-JUDGE@@ JSON`` to a private copy of stdout. They come from the
candidate's process, so they are claims, not facts: no key signs them (a key in
that process would be the candidate's too). Outcomes become verdicts only on the
host, against expectations the sandbox never saw (:mod:`sparring.judge.withheld`).
Two things are still read from the report alone, both in the candidate's
disfavour: an outcome other than ``passed`` fails a test, and audit flags count.
The ``start`` line is written before any candidate code can run, so its absence
is the judge's own fault (the runner never came up).

Outcomes: ``passed``, ``failed``, ``error``, ``skipped``, ``xfailed``,
``xpassed`` from the run, plus ``missing`` for an expected id that never
reported. Only ``passed`` can count as a pass.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sparring.judge.withheld import Observation

V = TypeVar("V")

MARK = "@@SPARRING-JUDGE@@"
MAX_LINES = 100_000


@dataclass
class RunReport:
    """What the report lines of one pytest run claim."""

    started: bool = False
    done: bool = False
    exitstatus: int | None = None
    outcomes: dict[str, str] = field(default_factory=dict)
    observations: dict[str, dict[int, Observation]] = field(default_factory=dict)
    collected: list[str] = field(default_factory=list)
    collect_errors: dict[str, str] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    audit_flags: list[str] = field(default_factory=list)
    """Flags raised at runtime by the launcher's audit hook (what the candidate's code did)."""
    malformed: int = 0
    """Lines with the marker that did not parse."""


def _observations(raw: Any) -> dict[int, Observation]:
    out: dict[int, Observation] = {}
    if not isinstance(raw, list):
        raise ValueError("observations must be a list")
    for entry in raw:
        sid, count, values, over = entry[:4]
        rng = entry[4] if len(entry) > 4 else None
        extremes = (str(rng[0]), str(rng[1])) if isinstance(rng, list) and len(rng) == 2 else None
        vals = tuple(str(v) for v in values)
        # Every observation has a value: a count without values (or fewer than the distinct ones) is forged.
        if not isinstance(sid, int) or not isinstance(count, int) or count < len(vals) or (count and not vals):
            raise ValueError("bad observation entry")
        prev = out.get(sid)
        if prev is not None:  # the same site twice: keep every value, the smaller count, no range
            out[sid] = Observation(min(prev.count, count), prev.values + vals, prev.overflow or bool(over))
        else:
            out[sid] = Observation(count, vals, bool(over), extremes)
    return out


def parse_report(text: str) -> RunReport:
    """The claims of ``text``'s report lines, in order. A test reported twice keeps its worst claim."""
    rep = RunReport()
    for n, line in enumerate(text.splitlines()):
        if n > MAX_LINES:
            break
        if not line.startswith(MARK + " "):
            if MARK in line:
                rep.malformed += 1
            continue
        try:
            obj: dict[str, Any] = json.loads(line[len(MARK) + 1 :])
            kind = obj.get("kind")
            if kind == "start":
                rep.started = True
            elif kind == "collected":
                rep.collected = [str(x) for x in obj.get("ids", [])]
            elif kind == "collect_error":
                rep.collect_errors[str(obj.get("id"))] = str(obj.get("detail", ""))
            elif kind == "test":
                tid = str(obj["id"])
                obs = _observations(obj.get("obs", []))
                outcome = str(obj["outcome"])
                if tid in rep.outcomes:  # reported twice: a forgery, or a plugin gone wrong; never a pass
                    outcome = "error"
                rep.outcomes[tid] = outcome
                rep.observations[tid] = obs
                rep.durations[tid] = float(obj.get("duration", 0.0))
            elif kind == "audit":
                rep.audit_flags.append(str(obj.get("flag")))
            elif kind == "done":
                rep.done = True
                rep.exitstatus = int(obj.get("exitstatus", -1))
        except Exception:  # noqa: BLE001 - candidate-made text: any failure (RecursionError too) is malformed
            rep.malformed += 1
    return rep


def split_ids(outcomes: Mapping[str, V], prefix: str) -> dict[str, V]:
    """Outcomes of the ids under ``prefix/`` (rootdir-relative), with the prefix removed."""
    p = prefix.rstrip("/") + "/"
    return {k[len(p) :]: v for k, v in outcomes.items() if k.startswith(p)}
