"""The file format of a task's generated (dynamic) tests: where the spec lives and how inputs are written.

A task opts in to dynamic tests with ``hidden/dynamic.json`` (the strategies are
described in :mod:`sparring.judge.dynamic.inputs`, which reads it). Seed values in that
file are *input JSON*: :func:`to_input` tags tuples, dicts, sets and bytes the way
:func:`sparring.judge.inside.judge_driver.decode_args` reads them back. Both are task
data formats, so they live here in the task room: importers and families write
them, the judge reads them, and neither imports the other.
"""

from __future__ import annotations

import math
from typing import Any

DYNAMIC_FILE = "dynamic.json"
"""The dynamic-test spec, in the task's hidden/ folder."""


class NotInputData(TypeError):
    """A value that cannot cross to the dynamic-test driver as input JSON."""


def to_input(x: Any) -> Any:
    """``x`` as input JSON (see :func:`sparring.judge.inside.judge_driver.decode_args`); NotInputData if impossible."""
    t = type(x)
    if x is None or t is bool or t is int or t is str:
        return x
    if t is float:
        if not math.isfinite(x):
            raise NotInputData("a non-finite float")
        return x
    if t is list:
        return [to_input(v) for v in x]
    if t is tuple:
        return {"tuple": [to_input(v) for v in x]}
    if t is dict:
        return {"dict": [[to_input(k), to_input(v)] for k, v in x.items()]}
    if t is set or t is frozenset:
        return {t.__name__: sorted((to_input(v) for v in x), key=repr)}
    if t is bytes:
        return {"bytes": x.hex()}
    raise NotInputData(f"type {t.__name__}")
