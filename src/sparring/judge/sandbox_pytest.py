"""The judge's pytest launcher. It runs INSIDE the judge's sandbox, never on the host.

Copied into the judge's read-only config mount (``/judge/cfg``) and started as
``python -s /judge/cfg/sandbox_pytest.py WORKSPACE`` with one JSON line on stdin:
``root`` (a scratch directory to run in), ``files`` (probe test files, relative to
``root``: the judge's tests rewritten on the host so that every assert only
*observes*, see :mod:`sparring.judge.probe`), ``copy`` (read-only directories
whose files the tests may need, copied under ``root`` first), ``args`` (what to
collect, relative to ``root``) and ``seed`` (test order).

Nothing here is trusted. The candidate's code runs in this process and may
rewrite anything in it, this module included; the host decides every outcome
from observations compared with expected values that never enter the sandbox.
What this launcher still does keeps honest runs clean and failures readable:

* reads and closes stdin, keeps a private duplicate of the real stdout for the
  report and points fd 1 at stderr, so a candidate's prints never mix with it;
* imports pytest and its own modules while /workspace is not on ``sys.path``,
  then *appends* /workspace, with a path hook that imports only Python *source*
  from it (no extension modules, no bytecode: a workspace ``__pycache__`` is
  never read, see :mod:`sparring.judge.sandbox_imports`);
* runs pytest with the judge's pinned ini, no conftest files, no autoloaded
  plugins and a shuffled test order (seeded by the judge);
* emits ``start`` before any candidate code can run (the host reads a missing
  ``start`` as the judge's own fault, anything later as the candidate's).

The report is a stream of lines ``@@SPARRING-JUDGE@@ JSON``: ``start``,
``collected``, ``collect_error``, one ``test`` per test with its outcome and
its observations, ``audit`` (what the audit hook saw) and ``done``.

Only the standard library and pytest may be imported here.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sys
from typing import Any

import pytest

MARK = "@@SPARRING-JUDGE@@"
# Audit events the candidate's code must not raise: event -> (flag, who counts as the caller).
# "direct": the code that called the audited function; "through": the first frame outside the standard
# library (so pathlib.Path.read_text or socket.create_connection still lead back to the candidate).
AUDITED = {
    "socket.connect": ("network_attempt", "through"),
    "socket.getaddrinfo": ("network_attempt", "through"),
    "socket.sendto": ("network_attempt", "through"),
    "socket.bind": ("network_attempt", "through"),
    "open": ("reads_judge_paths", "through"),
    "os.listdir": ("reads_judge_paths", "through"),
    "os.scandir": ("reads_judge_paths", "through"),
    "sys._getframe": ("runtime_probe", "direct"),
    "gc.get_objects": ("runtime_probe", "direct"),
    "gc.get_referrers": ("runtime_probe", "direct"),
    "gc.get_referents": ("runtime_probe", "direct"),
    "sys.settrace": ("runtime_probe", "direct"),
    "sys.setprofile": ("runtime_probe", "direct"),
    "sys.addaudithook": ("runtime_probe", "direct"),
    "ctypes.dlopen": ("runtime_probe", "through"),
    "object.__getattr__": ("runtime_probe", "direct"),
    "object.__setattr__": ("runtime_probe", "through"),
}
# For object.__getattr__/__setattr__ only these attribute names count: the ways to a frame (and from
# there to the judge's locals and the tests' expected values) and to a function's code.
ATTR_EVENTS = frozenset({"object.__getattr__", "object.__setattr__"})
WATCHED_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "__code__"})
PATH_EVENTS = frozenset({"open", "os.listdir", "os.scandir"})


class Reporter:
    """A pytest plugin object: outcome and observations per test id, as report lines."""

    def __init__(self, fd: int, seed: int, recorder: Any) -> None:
        self._fd = fd
        self._seed = seed
        self._rec = recorder
        self._state: dict[str, str] = {}
        self._dur: dict[str, float] = {}
        self._workspace = "/workspace/"
        self._stdlib = os.path.dirname(os.__file__) + "/"
        self._in_hook = False
        self._audit_flags: set[str] = set()

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """An audit hook: flags what the candidate's code does at runtime (evidence for review only)."""
        rule = AUDITED.get(event)
        if rule is None or self._in_hook:
            return
        self._in_hook = True
        try:
            if event in ATTR_EVENTS and (len(args) < 2 or args[1] not in WATCHED_ATTRS):
                return
            if event in PATH_EVENTS:
                path = args[0] if args else None
                if isinstance(path, bytes):
                    path = path.decode(errors="replace")
                if not isinstance(path, str) or not os.path.abspath(path).startswith("/judge"):
                    return
            if rule[0] in self._audit_flags or not self._called_by_candidate(rule[1] == "through"):
                return
            self._audit_flags.add(rule[0])
            self.emit({"kind": "audit", "flag": rule[0], "event": event})
        finally:
            self._in_hook = False

    def _called_by_candidate(self, through_stdlib: bool) -> bool:
        f = sys._getframe(2)  # 0: this method, 1: audit(), 2: the code that raised the event
        while f is not None:
            name = f.f_code.co_filename
            if name.startswith(self._workspace):
                return True
            if not through_stdlib or not (name.startswith(self._stdlib) or name.startswith("<frozen")):
                return False
            f = f.f_back  # type: ignore[assignment]
        return False

    def emit(self, obj: dict[str, Any]) -> None:
        data = f"{MARK} {json.dumps(obj, sort_keys=True, separators=(',', ':'))}\n".encode()
        while data:
            n = os.write(self._fd, data)
            data = data[n:]

    def pytest_sessionstart(self, session: Any) -> None:
        self.emit({"kind": "start"})

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        random.Random(self._seed).shuffle(items)
        self.emit({"kind": "collected", "ids": [it.nodeid for it in items]})

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.emit({"kind": "collect_error", "id": report.nodeid, "detail": str(report.longrepr)[-800:]})

    def pytest_runtest_setup(self, item: Any) -> None:
        self._rec.start(item.nodeid)

    def pytest_runtest_logreport(self, report: Any) -> None:
        tid = report.nodeid
        xfail = hasattr(report, "wasxfail")
        self._dur[tid] = self._dur.get(tid, 0.0) + float(getattr(report, "duration", 0.0) or 0.0)
        if report.when == "setup":
            if report.failed:
                self._state[tid] = "error"
            elif report.skipped:
                self._state[tid] = "xfailed" if xfail else "skipped"
        elif report.when == "call":
            if report.passed:
                self._state[tid] = "xpassed" if xfail else "passed"
            elif report.failed:
                self._state[tid] = "failed"
            else:
                self._state[tid] = "xfailed" if xfail else "skipped"
        elif report.when == "teardown":
            outcome = self._state.get(tid, "error")
            if report.failed:
                outcome = "error"
            self.emit({"kind": "test", "id": tid, "outcome": outcome, "duration": round(self._dur.get(tid, 0.0), 6),
                       "obs": self._rec.take()})  # fmt: skip

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self.emit({"kind": "done", "exitstatus": int(exitstatus), "collected": int(session.testscollected)})


def _stage(root: str, files: dict[str, str], copy: dict[str, str]) -> None:
    for rel, src in copy.items():
        if os.path.isdir(src):
            shutil.copytree(src, os.path.join(root, rel), symlinks=True, dirs_exist_ok=True)
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def main(argv: list[str]) -> int:
    job = json.loads(sys.stdin.readline())
    sys.stdin.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    report_fd = os.dup(1)
    os.set_inheritable(report_fd, False)
    os.dup2(2, 1)
    import sandbox_imports
    import sandbox_observe

    workspace = os.path.abspath(argv[0])
    root = str(job["root"])
    _stage(root, dict(job.get("files", {})), dict(job.get("copy", {})))
    reporter = Reporter(report_fd, int(job["seed"]), sandbox_observe.RECORDER)
    sys.addaudithook(reporter.audit)
    sandbox_imports.source_only(workspace, bool(job.get("allow_binary")))
    os.chdir(workspace)
    sys.path.append(workspace)
    os.environ["PYTHONPATH"] = workspace  # for test subprocesses; this interpreter is already up
    args = [
        "-c", os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytest.ini"),
        "--rootdir", root, "--noconftest", "-p", "no:cacheprovider", "-p", "no:stepwise",
        "-q", "-o", "addopts=", "-o", "python_files=test_*.py *_test.py",
        *[a if a.startswith("-") and not a.startswith("--ignore=") else _under(root, a) for a in job["args"]],
    ]  # fmt: skip
    return int(pytest.main(args, plugins=[reporter]))


def _under(root: str, arg: str) -> str:
    if arg.startswith("--ignore="):
        return "--ignore=" + os.path.join(root, arg[len("--ignore="):])
    return os.path.join(root, arg)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
