"""Admission: whether a task enters the library, decided by running the real judge on it.

It sits above ``judge/`` (it scores the initial state, the reference solution,
hacks and alternatives) and below the CLI and training (the layering: tests/test_layering.py); the task
data it reads and writes (``tasks.loader.solution_diff``, the
``admission.json`` record) stays in ``tasks/``.

Public API: :func:`check_task` / :func:`check_tasks` and their
:class:`CheckReport`, the stored record (:func:`admission_record`,
:func:`store_admission`), environment drift (:func:`regress`) and the
throughput benchmark (:func:`run_admission_bench`).
"""

from sparring.admission.check import (
    REFERENCE_RUNS,
    CheckReport,
    Problem,
    admission_record,
    check_task,
    check_tasks,
    store_admission,
)
from sparring.admission.regress import Drift, regress

__all__ = [
    "REFERENCE_RUNS",
    "CheckReport",
    "Drift",
    "Problem",
    "admission_record",
    "check_task",
    "check_tasks",
    "regress",
    "store_admission",
]
