"""The reference solution's trace, kept on the host from one process to the next.

A judgement compares the candidate's observations with what the reference solution's run of the same
probes observed (:class:`sparring.judge.withheld.RefTrace`). A judge makes that trace once per task,
the first time it judges the task, with a second launcher in a sandbox no candidate ever ran in. Kept
only in the judge's memory, every process paid it again: a one-shot ``rollout``, ``judge batch``,
``eval`` or ``tasks check`` spent two launchers on each task's first judgement, and two judges of one
process (a demo's warm start and its training) each made their own.

This cache keeps each trace in one small JSON file, under ``$SPARRING_TRACE_CACHE`` (default
``~/.cache/sparring/judge-traces``; ``off`` turns it off), named by a hash of everything the trace is a
function of:

- the task's exact bytes (its digest: workspace, hidden tests, reference solution, spec, image pin);
- the judge's version (its scoring code, launcher included, and its configuration, which holds the
  split and the regression tests);
- which tests ran (the training split or the evaluation split);
- for a task without its own image, the host system it ran on (:mod:`sparring.sandbox.hostenv`): a host
  upgrade may move what the reference observes, so it makes the trace again, as it re-checks admission.

It is a cache, never a verdict: the trace is the host's own reading of a run of the task's reference
solution (no candidate touches it), the same reading the judge would make again. An entry that cannot
be read, is not of this format, names another key, or is not the user's own file writable by the user
alone is ignored and replaced; one that cannot be written costs only a later re-run. Entries are
written whole (a temporary file, then a rename), so a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

from sparring import atomicfile
from sparring.judge.withheld import RefTrace
from sparring.tasks.loader import Task

ENV = "SPARRING_TRACE_CACHE"
OFF = "off"
FORMAT = "sparring-reference-trace/1"


def default_root() -> Path | None:
    """``$SPARRING_TRACE_CACHE``, else ``~/.cache/sparring/judge-traces``; None when set to ``off``."""
    env = os.environ.get(ENV, "").strip()
    if env.lower() == OFF:
        return None
    return Path(env) if env else Path.home() / ".cache" / "sparring" / "judge-traces"


def trace_key(digest: str, judge_version: str, evaluating: bool, host_env: str | None) -> str:
    """The key of a trace: a hash of what it is a function of (``host_env``: the host system's id for a
    task without its own image, None for a task whose image is its system)."""
    h = hashlib.sha256(FORMAT.encode() + b"\n")
    for part in (digest, judge_version, "eval" if evaluating else "train", host_env or "image"):
        h.update(part.encode() + b"\n")
    return h.hexdigest()


def task_trace_key(task: Task, judge_version: str, evaluating: bool) -> str:
    """:func:`trace_key` of ``task`` as this host runs it."""
    host_env = None
    if task.spec.environment.image is None:
        from sparring.sandbox.hostenv import current_host_environment

        host_env = current_host_environment().id
    return trace_key(task.digest, judge_version, evaluating, host_env)


def encode(key: str, trace: RefTrace) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "key": key,
        "counts": {
            tid: {str(sid): n for sid, n in sorted(sites.items())}
            for tid, sites in sorted(trace.counts.items())
        },
        "unverifiable": sorted(trace.unverifiable),
        "fallback": sorted(trace.fallback),
    }


def _site_ids(value: Any) -> frozenset[int] | None:
    if not isinstance(value, list) or not all(type(v) is int and v >= 0 for v in value):
        return None
    return frozenset(value)


def decode(key: str, data: Any) -> RefTrace | None:
    """The trace ``data`` holds if it is one of this format made for ``key``, else None."""
    if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("key") != key:
        return None
    counts_in = data.get("counts")
    unverifiable, fallback = _site_ids(data.get("unverifiable")), _site_ids(data.get("fallback"))
    if not isinstance(counts_in, dict) or unverifiable is None or fallback is None:
        return None
    counts: dict[str, dict[int, int]] = {}
    for tid, sites in counts_in.items():
        if not isinstance(sites, dict):
            return None
        row: dict[int, int] = {}
        for sid, n in sites.items():
            if not (isinstance(sid, str) and sid.isdigit() and sid.isascii()) or type(n) is not int or n < 0:
                return None
            row[int(sid)] = n
        counts[tid] = row
    return RefTrace(counts, unverifiable, fallback)


def _private(st: os.stat_result) -> bool:
    """Whether an entry is this user's own and nobody else may write it (a cache directory shared with
    others, ``$SPARRING_TRACE_CACHE`` on a shared disk, must not let them choose what the judge expects)."""
    return st.st_uid == os.getuid() and not st.st_mode & 0o022


class TraceCache:
    """Reference traces on disk under ``root``, one file per key (see the module's docstring)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)

    @classmethod
    def default(cls) -> TraceCache | None:
        root = default_root()
        return None if root is None else cls(root)

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json"

    def get(self, key: str) -> RefTrace | None:
        """The trace stored for ``key``, or None (none stored, or one that does not hold up)."""
        try:
            with open(self._path(key), "rb") as f:
                if not _private(os.fstat(f.fileno())):
                    return None
                data = json.loads(f.read())
        except (OSError, ValueError, RecursionError):
            return None
        return decode(key, data)

    def put(self, key: str, trace: RefTrace) -> None:
        """Store ``trace`` for ``key``; a cache that cannot be written is left as it is."""
        dest = self._path(key)
        try:
            dest.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            atomicfile.write_text(dest, json.dumps(encode(key, trace), sort_keys=True), mode=0o600)
        except OSError:
            pass
