"""What a task says its listed hidden tests do on the initial state (``hidden/.admission/initial_outcomes.json``).

Admission's generic rule is weak: the hidden tests must not *all* pass on the
initial state. A task imported from a benchmark that names its tests' roles
(SWE-bench's FAIL_TO_PASS and PASS_TO_PASS) knows more: each ``fail`` id must fail
there and each ``pass`` id must pass (the reference must pass them all, which
``solution_passes`` already checks). The file maps each id (relative to hidden/,
as ``judge.hidden_tests`` lists it) to the words a rejection uses to name it::

    {"fail": {"test_a.py::test_x": "FAIL_TO_PASS test a.py::test_x of inst-1"},
     "pass": {"test_a.py::test_y": "PASS_TO_PASS test a.py::test_y of inst-1"}}

It lies in hidden/.admission/, so neither the agent nor the judge's pytest sees it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from sparring.errors import TaskError
from sparring.tasks import taskfs
from sparring.tasks.loader import Task

OUTCOMES_FILE = ".admission/initial_outcomes.json"


def expected_initial(task: Task) -> tuple[dict[str, str], dict[str, str]] | None:
    """(ids that must fail, ids that must pass) on the initial state, each with its name; None without a file."""
    data = taskfs.read_file(task.hidden, OUTCOMES_FILE)  # never through a link
    if data is None:
        return None
    try:
        raw = json.loads(data)
        fail, keep = raw.get("fail", {}), raw.get("pass", {})
        if not all(isinstance(d, dict) for d in (fail, keep)):
            raise ValueError("fail and pass must be objects")
    except (ValueError, AttributeError) as e:
        raise TaskError(f"hidden/{OUTCOMES_FILE} is malformed ({e})") from None
    return {str(k): str(v) for k, v in fail.items()}, {str(k): str(v) for k, v in keep.items()}


def outcome_problems(task: Task, initial_runs: Sequence[Mapping[str, str]]) -> list[str]:
    """Why the initial state's per-test outcomes break the task's declared ones (empty: they agree).

    A ``fail`` id that passed in any run, or a ``pass`` id that did not pass in every run, is named."""
    declared = expected_initial(task)
    if declared is None:
        return []
    fail, keep = declared
    out = [f"{why} already passes on the initial state (it must fail there and pass with the fix)"
           for t, why in sorted(fail.items()) if any(r.get(t) == "passed" for r in initial_runs)]  # fmt: skip
    for t, why in sorted(keep.items()):
        seen = sorted({r.get(t, "missing") for r in initial_runs} - {"passed"})
        if seen:
            out.append(
                f"{why} is {'/'.join(seen)} on the initial state (it must pass there and with the fix)"
            )
    return out
