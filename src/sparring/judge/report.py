"""Read the launcher's report lines: what the test process *says* happened.

The launcher (:mod:`sparring.judge.inside.judge_launcher`) writes lines
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

The host reads this text on the loop that drives every rollout, and its author
chooses every byte of it. So the read is linear in the text and capped
(:data:`MAX_REPORT_CHARS`, :data:`MAX_LINE_CHARS`, :data:`MAX_LINES`, at most
:data:`MAX_DISTINCT` distinct values per test and site, as the launcher itself
keeps), and the judge runs it in a worker thread. A report past a cap cannot
come from the judge's launcher: :attr:`RunReport.over_cap` names the cap and the
judge flags ``forged_report`` (reward 0), the candidate's fault, never the host's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sparring.judge.inside.judge_observe import MAX_DISTINCT
from sparring.judge.withheld import Observation

V = TypeVar("V")

MARK = "@@SPARRING-JUDGE@@"
MAX_LINES = 100_000
"""Report lines read at most (the launcher writes one per test, and a handful more)."""
MAX_REPORT_CHARS = 8 << 20
"""Characters of a report read at most (a sandbox's stdout is capped at 1 MiB before it gets here)."""
MAX_LINE_CHARS = 2 << 20
"""Characters of one report line read at most (beyond the sandbox's whole stdout cap: never an honest line)."""


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
    over_cap: str = ""
    """The first cap the report broke (empty: none): no launcher of the judge's writes such a report."""

    def exceed(self, what: str) -> None:
        self.over_cap = self.over_cap or what


class OverCap(ValueError):
    """A report line past one of the parser's caps."""


def _observations(raw: Any, rep: RunReport | None = None) -> dict[int, Observation]:
    """One test's observations. Linear in the entries: a site sent twice (the launcher sends each once)
    keeps every distinct value of both, the smaller count and no range, and marks the report as past
    its caps; more than :data:`MAX_DISTINCT` distinct values for a site is past a cap (:class:`OverCap`)."""
    if not isinstance(raw, list):
        raise ValueError("observations must be a list")
    counts: dict[int, int] = {}
    values: dict[int, dict[str, None]] = {}
    overflow: dict[int, bool] = {}
    ranges: dict[int, tuple[str, str] | None] = {}
    for entry in raw:
        sid, count, vals, over = entry[:4]
        rng = entry[4] if len(entry) > 4 else None
        if not isinstance(sid, int) or not isinstance(count, int) or not isinstance(vals, list):
            raise ValueError("bad observation entry")
        if len(vals) > MAX_DISTINCT:
            raise OverCap(f"more than {MAX_DISTINCT} values for one site")
        # Every observation has a value: a count without values (or fewer than the distinct ones) is forged.
        if count < len(vals) or (count and not vals):
            raise ValueError("bad observation entry")
        seen = values.get(sid)
        if seen is None:
            values[sid] = dict.fromkeys(str(v) for v in vals)
            counts[sid], overflow[sid] = count, bool(over)
            ranges[sid] = (str(rng[0]), str(rng[1])) if isinstance(rng, list) and len(rng) == 2 else None
        else:
            if rep is not None:
                rep.exceed("a site reported twice in one test")
            seen.update(dict.fromkeys(str(v) for v in vals))
            if len(seen) > MAX_DISTINCT:
                raise OverCap(f"more than {MAX_DISTINCT} values for one site")
            counts[sid] = min(counts[sid], count)
            overflow[sid] = overflow[sid] or bool(over)
            ranges[sid] = None
    return {
        sid: Observation(counts[sid], tuple(vals), overflow[sid], ranges[sid]) for sid, vals in values.items()
    }


def parse_report(text: str) -> RunReport:
    """The claims of ``text``'s report lines, in order. A test reported twice keeps its worst claim."""
    rep = RunReport()
    if len(text) > MAX_REPORT_CHARS:
        rep.exceed(f"report over {MAX_REPORT_CHARS} characters")
        text = text[:MAX_REPORT_CHARS]
    for n, line in enumerate(text.splitlines()):
        if n >= MAX_LINES:
            rep.exceed(f"report over {MAX_LINES} lines")
            break
        if not line.startswith(MARK + " "):
            if MARK in line:
                rep.malformed += 1
            continue
        if len(line) > MAX_LINE_CHARS:
            rep.exceed(f"report line over {MAX_LINE_CHARS} characters")
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
                obs = _observations(obj.get("obs", []), rep)
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
        except OverCap as e:
            rep.exceed(str(e))
            rep.malformed += 1
        except Exception:  # noqa: BLE001 - candidate-made text: any failure (RecursionError too) is malformed
            rep.malformed += 1
    return rep


def split_ids(outcomes: Mapping[str, V], prefix: str) -> dict[str, V]:
    """Outcomes of the ids under ``prefix/`` (rootdir-relative), with the prefix removed."""
    p = prefix.rstrip("/") + "/"
    return {k[len(p) :]: v for k, v in outcomes.items() if k.startswith(p)}
