"""The dynamic-test driver. It runs INSIDE the judge's sandbox, in its own process.

``python -s /judge/cfg/sandbox_driver.py WORKSPACE`` with one JSON line on stdin:
``{"module", "function", "inputs": [[arg, ...], ...]}``. It imports the function
from the workspace (appended to ``sys.path`` after this script's own imports),
calls it on every input in the given order and writes one JSON line to a private
duplicate of stdout: a list with, per input, ``{"ok": VALUE}``,
``{"raised": EXCEPTION_TYPE}`` or ``{"bad": WHY}``.

Values are encoded with their *exact* types (``type(x) is int``, not
``isinstance``): an object whose ``__eq__`` always answers True, an int subclass
or a lazy proxy cannot cross; the comparison happens on the host, on plain data,
in another process. Only the standard library may be imported here.
"""

from __future__ import annotations

import json
import math
import os
import sys
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
    """Inputs arrive as JSON; ``{"tuple": [...]}`` becomes a tuple, everything else is plain JSON."""
    if isinstance(v, list):
        return [decode_args(x) for x in v]
    if isinstance(v, dict):
        if set(v) == {"tuple"}:
            return tuple(decode_args(x) for x in v["tuple"])
        return {k: decode_args(x) for k, x in v.items()}
    return v


def main(argv: list[str]) -> int:
    job = json.loads(sys.stdin.readline())
    sys.stdin.close()
    out_fd = os.dup(1)
    os.set_inheritable(out_fd, False)
    os.dup2(2, 1)
    workspace = argv[0]
    os.chdir(workspace)
    sys.path.append(workspace)
    results: list[dict[str, Any]] = []
    try:
        import importlib

        fn = getattr(importlib.import_module(job["module"]), job["function"])
    except BaseException as e:  # noqa: BLE001 - any failure to import is the candidate's
        results = [{"raised": f"import:{type(e).__name__}"}] * len(job["inputs"])
        fn = None
    if fn is not None:
        for args in job["inputs"]:
            try:
                value = fn(*decode_args(args))
                results.append({"ok": encode(value)})
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
