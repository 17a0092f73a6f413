"""The verdict channel costs the host linear, capped CPU, off the event loop (issue 33).

What the judge's launcher reports comes from the candidate's process. A forged line that repeats one site
id 75,000 times (0.9 MB) cost the host 5-6 s of CPU in a quadratic merge, on the loop that drives every
rollout. Now the parse is linear, a report past a cap (a site sent twice, more values per site than the
launcher keeps, a line or report too long) is flagged ``forged_report`` and scores 0.
"""

from __future__ import annotations

import json
import threading

from sparring.judge import report as report_mod
from sparring.judge.inside.judge_observe import MAX_DISTINCT
from sparring.judge.pytest_judge import PytestJudge
from sparring.judge.report import MARK, MAX_LINE_CHARS, parse_report
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.loader import solution_diff

TID = "hidden/test_hidden_clip.py::test_mixed"


def _line(entries: list[list[object]], tid: str = TID) -> str:
    return MARK + " " + json.dumps({"kind": "test", "id": tid, "outcome": "passed", "obs": entries})


def _forged(n: int) -> str:
    """One report line repeating site 0 ``n`` times (75,000 times: about 0.9 MB, the red team's line)."""
    return _line([[0, 1, ["1"], 0]] * n)


def test_a_site_repeated_75000_times_is_read_once_and_flagged():
    line = _forged(75_000)
    assert 0.8e6 < len(line) < 1.5e6
    rep = parse_report(line)
    assert rep.over_cap  # a site twice in one test: no launcher of the judge's writes that
    obs = rep.observations[TID][0]
    # Duplicates merged through a dict, not tuple concatenation:
    assert obs.values == ("1",) and obs.count == 1


def test_what_a_repeated_site_keeps_does_not_grow_with_the_repeats():
    """The merge keeps one entry per distinct value (a dict), so four times the repeats is four times the
    reading and no more kept; the quadratic merge copied everything kept so far on every repeat.
    (CPU figures: ``benchmarks/report_parse_bench.py``.)"""
    kept = []
    for n in (5_000, 20_000):
        rep = parse_report(_forged(n))
        obs = rep.observations[TID]
        kept.append((len(obs), len(obs[0].values)))
    assert kept == [(1, 1), (1, 1)]


def test_more_distinct_values_than_the_launcher_keeps_is_past_the_cap():
    ok = parse_report(_line([[0, MAX_DISTINCT, [str(i) for i in range(MAX_DISTINCT)], 0]]))
    assert not ok.over_cap and len(ok.observations[TID][0].values) == MAX_DISTINCT  # control: at the cap
    over = parse_report(_line([[0, MAX_DISTINCT + 1, [str(i) for i in range(MAX_DISTINCT + 1)], 0]]))
    assert over.over_cap and TID not in over.outcomes
    split = _line([[0, 300, [str(i) for i in range(200)], 0], [0, 300, [str(i) for i in range(200, 400)], 0]])
    assert parse_report(split).over_cap and TID not in parse_report(split).outcomes


def test_a_line_longer_than_the_cap_is_not_parsed():
    long_line = _line([[0, 1, ["x" * (MAX_LINE_CHARS + 10)], 0]])
    rep = parse_report(long_line)
    assert rep.over_cap and rep.malformed == 1 and not rep.outcomes


def test_an_honest_report_is_within_every_cap(backend, dynamic_task):
    import asyncio

    res = asyncio.run(PytestJudge(backend).score(dynamic_task, solution_diff(dynamic_task)))
    assert res.reward == 1.0 and "forged_report" not in res.flags
    assert "report_over_cap" not in res.metrics


# The attack, as candidate code: at import (the hidden tests import solution), it writes the forged line to
# every pipe it holds (the launcher's private report descriptor among them), then behaves. Bounded: 64 fds;
# 45,000 repeats (0.6 MB) leave the rest of the report inside the sandbox's 1 MiB stdout cap.
FORGER = """\
import json as _json, os as _os, stat as _stat

_LINE = ("@@SPARRING-JUDGE@@ " + _json.dumps({"kind": "test", "id": "hidden/test_hidden_clip.py::test_mixed",
         "outcome": "passed", "obs": [[0, 1, ["1"], 0]] * 45000}, separators=(",", ":")) + "\\n").encode()
for _fd in range(3, 64):
    try:
        if _stat.S_ISFIFO(_os.fstat(_fd).st_mode):
            _view = memoryview(_LINE)
            while _view:
                _view = _view[_os.write(_fd, _view):]
    except OSError:
        pass


def clip_sum(xs, lo, hi):
    return sum(min(max(x, lo), hi) for x in xs)
"""


def test_a_forged_line_from_the_candidate_scores_zero_with_a_flag(backend, dynamic_task, monkeypatch):
    import asyncio

    import sparring.judge.pytest_judge as pj

    parsed_in: list[str] = []
    real = report_mod.parse_report

    def spy(text: str) -> report_mod.RunReport:
        parsed_in.append(threading.current_thread().name)
        return real(text)

    monkeypatch.setattr(pj, "parse_report", spy)
    diff = WorkspaceDiff(files={"solution.py": FORGER.encode()})
    res = asyncio.run(PytestJudge(backend).score(dynamic_task, diff))
    # Positive control: the forged line reached the host (only it puts a site twice in one test).
    assert res.metrics.get("report_over_cap") == 1.0
    assert res.reward == 0.0 and "forged_report" in res.flags
    # The candidate's report was read in a worker thread, not on the event loop's.
    assert parsed_in and all(name != threading.main_thread().name for name in parsed_in)
