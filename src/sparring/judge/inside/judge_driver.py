"""The dynamic-test driver. It runs INSIDE the judge's sandbox, in its own process.

``python -s -S /judge/cfg/judge_driver.py WORKSPACE [ALIAS...]`` (``ALIAS``: another path the sandbox
shows the workspace at, an image's ``/testbed``) with one JSON line on stdin:
``{"module", "function", "inputs": [[arg, ...], ...]}``. It imports the function
from the workspace (appended to ``sys.path`` after this script's own imports),
calls it on every input in the given order and writes one JSON line to a private
duplicate of stdout: a list with, per input, ``{"ok": VALUE}``,
``{"raised": EXCEPTION_TYPE}``, ``{"bad": WHY}`` or, with ``"call_timeout_s"`` in the job,
``{"timeout": SECONDS}`` for a call that used more CPU time than that (a SIGPROF interval timer
per call: CPU, not wall time, so other load on the machine does not make a call time out). With
``"budget_s"``, once that much wall time has passed, the remaining inputs are not run and answer
``{"timeout": ...}`` too, so many slow calls cannot add up past the judge's own timeout.

Values are encoded with their *exact* types (``type(x) is int``, not
``isinstance``): an object whose ``__eq__`` always answers True, an int subclass
or a lazy proxy cannot cross; the comparison happens on the host, on plain data,
in another process. Only the standard library may be imported here.
"""

from __future__ import annotations

import json
import math
import os
import signal
import sys
import time
from typing import Any


class Unserialisable(TypeError):
    pass


def _dict_types() -> tuple[type, ...]:
    """The standard library's dict subclasses (Counter, OrderedDict, defaultdict), compared as dicts.

    Exact classes only: an instance of a user-defined subclass is still refused. Their contents are read
    with ``dict.items`` (C code), so patching the classes' Python methods cannot change what crosses."""
    import collections

    return (collections.Counter, collections.OrderedDict, collections.defaultdict)


_DICT_TYPES = _dict_types()


def encode(x: Any, depth: int = 0) -> Any:
    """A JSON value that identifies ``x`` and its exact type (tuples, sets, floats and dicts tagged)."""
    if depth > 50:
        raise Unserialisable("nested too deeply")
    t = type(x)
    if x is None or t is bool or t is str or t is int:
        return x
    if t is float:
        return {"float": repr(x) if not math.isnan(x) else "nan"}
    if t is list:
        return [encode(v, depth + 1) for v in x]
    if t is tuple:
        return {"tuple": [encode(v, depth + 1) for v in x]}
    if t is dict or t in _DICT_TYPES:
        # dict.items, not x.items: a stdlib mapping crosses as the plain dict it holds.
        items = [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(x)]
        return {"dict": sorted(items, key=lambda kv: json.dumps(kv, sort_keys=True))}
    if t is set or t is frozenset:
        vals = [encode(v, depth + 1) for v in x]
        return {t.__name__: sorted(vals, key=lambda v: json.dumps(v, sort_keys=True))}
    if t is bytes:
        return {"bytes": x.hex()}
    raise Unserialisable(f"type {t.__module__}.{t.__qualname__} is not plain data")


def decode_args(v: Any) -> Any:
    """Inputs arrive as JSON; ``{"tuple": [...]}`` becomes a tuple, ``{"dict": [[k, v], ...]}`` a dict
    (any keys), ``{"set"|"frozenset": [...]}`` a set, ``{"bytes": HEX}`` bytes; the rest is plain JSON."""
    if isinstance(v, list):
        return [decode_args(x) for x in v]
    if isinstance(v, dict):
        if len(v) == 1:
            ((tag, inner),) = v.items()
            if tag == "tuple":
                return tuple(decode_args(x) for x in inner)
            if tag == "dict" and isinstance(inner, list):
                return {decode_args(k): decode_args(x) for k, x in inner}
            if tag in ("set", "frozenset") and isinstance(inner, list):
                return (set if tag == "set" else frozenset)(decode_args(x) for x in inner)
            if tag == "bytes" and isinstance(inner, str):
                return bytes.fromhex(inner)
        return {k: decode_args(x) for k, x in v.items()}
    return v


class CallTimeout(BaseException):
    """Raised in the function under test when one call passes the job's ``call_timeout_s`` of CPU time."""


def _on_alarm(signum: int, frame: Any) -> None:
    raise CallTimeout


def main(argv: list[str]) -> int:
    job = json.loads(sys.stdin.readline())
    sys.stdin.close()
    out_fd = os.dup(1)
    os.set_inheritable(out_fd, False)
    os.dup2(2, 1)
    workspace, aliases = argv[0], argv[1:]  # aliases: the image's paths of the workspace (/testbed)
    import judge_imports

    judge_imports.start_site([workspace, *aliases])  # started with -S: see judge_imports.StartGuard
    judge_imports.source_only(workspace, bool(job.get("allow_binary")), aliases)
    # Workspace modules serve the candidate's code and this driver only (refusals need no report here: the
    # function's results are compared on the host, and the test run of the same diff reports them).
    here = os.path.dirname(os.path.abspath(__file__))
    judge_imports.gate(workspace, [here], lambda name, why: None, aliases)
    os.chdir(workspace)
    sys.path.append(workspace)
    results: list[dict[str, Any]] = []
    try:
        import importlib

        fn = getattr(importlib.import_module(job["module"]), job["function"])
    except BaseException as e:  # noqa: BLE001 - any failure to import is the candidate's
        results = [{"raised": f"import:{type(e).__name__}"}] * len(job["inputs"])
        fn = None
    limit = float(job.get("call_timeout_s") or 0)
    budget = float(job.get("budget_s") or 0)
    if fn is not None and limit > 0:
        signal.signal(signal.SIGPROF, _on_alarm)
    start = time.monotonic()
    if fn is not None:
        for args in job["inputs"]:
            if budget > 0 and time.monotonic() - start > budget:
                results.append({"timeout": budget})
                continue
            try:
                try:
                    if limit > 0:
                        signal.setitimer(signal.ITIMER_PROF, limit)
                    value = fn(*decode_args(args))
                finally:  # a one-shot timer: once disarmed here (or fired), nothing below is interrupted
                    if limit > 0:
                        signal.setitimer(signal.ITIMER_PROF, 0)
                results.append({"ok": encode(value)})
            except CallTimeout:
                results.append({"timeout": limit})
            except Unserialisable as e:
                results.append({"bad": str(e)})
            except BaseException as e:  # noqa: BLE001 - SystemExit too: an exit is an outcome, not an escape
                results.append({"raised": type(e).__name__})
    data = (json.dumps(results, sort_keys=True, separators=(",", ":")) + "\n").encode()
    while data:
        n = os.write(out_fd, data)
        data = data[n:]
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
