"""The judge's pytest launcher. It runs INSIDE the judge's sandbox, never on the host.

Copied into the judge's read-only config mount (``/judge/cfg``) and started as
``python -s /judge/cfg/sandbox_pytest.py WORKSPACE TESTDIR...`` with the judge's
secrets on stdin (one JSON line: ``key`` (hex), ``seed``). Before any code of the
candidate is imported it:

* reads and closes stdin, so the key is gone from every file descriptor;
* keeps a private duplicate of the real stdout for the report and points fd 1
  at stderr: whatever the candidate prints can neither flood nor forge the
  report channel by writing to stdout;
* imports pytest and its own modules while /workspace is not on ``sys.path``,
  then *appends* /workspace, so agent files cannot shadow pytest, hmac or any
  module already imported (sitecustomize/usercustomize in /workspace are never
  seen: site ran before /workspace was on the path);
* runs pytest with the judge's pinned ini, no conftest files, no autoloaded
  plugins and a shuffled test order (seeded by the judge).

The report is a stream of frames ``@@SPARRING-JUDGE@@ SEQ JSON HMAC``; each
test's outcome is its own frame, sent as soon as the test ends, so a run killed
half-way still reports what ran. The host accepts only frames whose HMAC-SHA256
(over ``SEQ|JSON``) verifies with the per-run key.

Only the standard library and pytest may be imported here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import random
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
    """A pytest plugin object: final outcome per test id, as signed frames."""

    def __init__(self, key: bytes, fd: int, seed: int) -> None:
        self._key = key
        self._fd = fd
        self._seq = 0
        self._seed = seed
        self._state: dict[str, str] = {}
        self._dur: dict[str, float] = {}
        self._raised: dict[str, str | None] = {}
        self._mismatch: set[str] = set()
        self._workspace = "/workspace/"
        self._stdlib = os.path.dirname(os.__file__) + "/"
        self._in_hook = False
        self._audit_flags: set[str] = set()
        self._asserts: dict[str, int] = {}

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """An audit hook (it cannot be removed once added): flags what the candidate's code does at runtime."""
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
        body = json.dumps(obj, sort_keys=True, separators=(",", ":"))
        mac = hmac.new(self._key, f"{self._seq}|{body}".encode(), hashlib.sha256).hexdigest()
        data = f"{MARK} {self._seq} {body} {mac}\n".encode()
        self._seq += 1
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

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        """What the test function itself did, seen before any report object exists: a candidate
        that rewrites reports (TestReport patches, makereport hooks) contradicts this."""
        try:
            res = yield
        except BaseException as e:
            self._raised[item.nodeid] = type(e).__name__
            raise
        self._raised[item.nodeid] = None
        return res

    def pytest_assertion_pass(self, item: Any, lineno: int, orig: str, expl: str) -> None:
        self._asserts[item.nodeid] = self._asserts.get(item.nodeid, 0) + 1

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
            if report.passed and self._raised.get(tid, "never called") is not None and not xfail:
                self._mismatch.add(tid)
                self._state[tid] = "failed"
            elif report.passed:
                self._state[tid] = "xpassed" if xfail else "passed"
            elif report.failed:
                self._state[tid] = "failed"
            else:
                self._state[tid] = "xfailed" if xfail else "skipped"
        elif report.when == "teardown":
            outcome = self._state.get(tid, "error")
            if report.failed:
                outcome = "error"
            frame: dict[str, Any] = {"kind": "test", "id": tid, "outcome": outcome}
            frame["duration"] = round(self._dur.get(tid, 0.0), 6)
            frame["asserts"] = self._asserts.get(tid, 0)
            if tid in self._mismatch:
                frame["mismatch"] = True
            self.emit(frame)

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        self.emit({"kind": "done", "exitstatus": int(exitstatus), "collected": int(session.testscollected)})


def main(argv: list[str]) -> int:
    secrets = json.loads(sys.stdin.readline())
    sys.stdin.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    report_fd = os.dup(1)
    os.set_inheritable(report_fd, False)
    os.dup2(2, 1)
    import pytest

    workspace, testdirs = argv[0], argv[1:]
    reporter = Reporter(bytes.fromhex(secrets["key"]), report_fd, int(secrets["seed"]))
    secrets.clear()
    sys.addaudithook(reporter.audit)
    os.chdir(workspace)
    sys.path.append(workspace)
    os.environ["PYTHONPATH"] = workspace  # for test subprocesses; this interpreter is already up
    args = [
        "-c", os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytest.ini"),
        "--rootdir", "/judge", "--noconftest", "-p", "no:cacheprovider", "-p", "no:stepwise",
        "-q", "-o", "addopts=", "-o", "python_files=test_*.py *_test.py", *testdirs,
    ]  # fmt: skip
    return int(pytest.main(args, plugins=[reporter]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
