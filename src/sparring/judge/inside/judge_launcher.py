"""The judge's pytest launcher. It runs INSIDE the judge's sandbox, never on the host.

Copied into the judge's read-only config mount (``/judge/cfg``) and started as
``python -s -S /judge/cfg/judge_launcher.py WORKSPACE ROOT [ALIAS...]`` (``ROOT``: a scratch
directory to run in; ``ALIAS``: another path the sandbox shows the workspace at, an image's ``/testbed``;
``-S``: the site set-up runs in the launcher, behind :class:`judge_imports.StartGuard`) with one JSON line on stdin: ``files`` (probe test files,
relative to ``ROOT``: the judge's tests rewritten on the host so that every
assert only *observes*, see :mod:`sparring.judge.dynamic.probe`), ``copy`` (read-only
directories whose files the tests may need, copied under ``ROOT`` first),
``args`` (what to collect, relative to ``ROOT``, and ``--ignore=`` paths) and
``seed`` (test order).

Nothing here is trusted. The candidate's code runs in this process and may
rewrite anything in it, this module included; the host decides every outcome
from observations compared with expected values that never enter the sandbox.
What this launcher still does keeps honest runs clean and failures readable:

* keeps private duplicates of stdin (the job) and of the real stdout (the report),
  points fd 0 at /dev/null and fd 1 at stderr, so a candidate's prints never mix
  with the report;
* configures pytest (the judge's pinned ini, no conftest files, no autoloaded
  plugins) and starts its session *before reading the job*: none of that depends on
  the job or reads /workspace, so a launcher prestarted in a warm sandbox
  (:class:`sparring.judge.runner.sandbox.JudgePool`) has done it while the sandbox
  waited, and a cold one does the same in the same order (then ``gc.freeze()``: the
  run's garbage collections skip pytest's own objects, which live as long as the
  process anyway; the first ``gc.get_objects``/``get_referrers``/``get_referents``
  unfreezes them, so such a walk finds what it would have found unfrozen);
* only then (:class:`JobGate`, the first ``pytest_collection`` hook) reads the job,
  writes the probes, *appends* /workspace to ``sys.path`` with a path hook that
  imports only Python *source* from it (no extension modules, no bytecode: a
  workspace ``__pycache__`` is never read, see :mod:`sparring.judge.inside.judge_imports`),
  installs the audit hook and emits ``start``, before any candidate code can run
  (the host reads a missing ``start`` as the judge's own fault, anything later as the
  candidate's); collection and the shuffled run (seeded by the judge) follow.

The report is a stream of lines ``@@SPARRING-JUDGE@@ JSON``: ``start``,
``collected``, ``collect_error``, one ``test`` per test with its outcome and
its observations, ``audit`` (what the audit hook saw) and ``done``.

Only the standard library and pytest may be imported here.
"""

from __future__ import annotations

import gc
import json
import os
import random
import shutil
import sys
from typing import Any


def candidate_roots(argv: list[str]) -> list[str]:
    """``WORKSPACE ROOT [ALIAS...]`` -> the paths the candidate's code lives at: the workspace, then its aliases."""
    return [os.path.abspath(p) for p in (argv[0], *argv[2:])]


if __name__ == "__main__":  # started with -S: the site set-up runs here, with the candidate's code refused
    import judge_imports

    judge_imports.start_site(candidate_roots(sys.argv[1:]))

import pytest  # noqa: E402

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
GC_WALKS = frozenset({"gc.get_objects", "gc.get_referrers", "gc.get_referents"})
WATCHED_ATTRS = frozenset({"tb_frame", "gi_frame", "cr_frame", "ag_frame", "__code__"})
PATH_EVENTS = frozenset({"open", "os.listdir", "os.scandir"})
IGNORE = "--ignore="
IMPORT_FLAG = "import_shadowing"  # judge_imports.FLAG: a workspace module refused to a dependency


class Reporter:
    """A pytest plugin object: outcome and observations per test id, as report lines."""

    def __init__(self, fd: int, recorder: Any, candidate_roots: list[str]) -> None:
        self._fd = fd
        self.seed = 0  # the job's, set by the gate before collection
        self.started = False
        self.frozen = False  # pytest's own objects frozen (JobGate), until something walks the collector
        self._rec = recorder
        self._state: dict[str, str] = {}
        self._dur: dict[str, float] = {}
        self._workspace = tuple(
            r.rstrip("/") + "/" for r in candidate_roots
        )  # where the candidate's code lives
        self._stdlib = os.path.dirname(os.__file__) + "/"
        self._in_hook = False
        self._audit_flags: set[str] = set()

    def audit(self, event: str, args: tuple[Any, ...]) -> None:
        """An audit hook: flags what the candidate's code does at runtime (evidence for review only)."""
        rule = AUDITED.get(event)
        if rule is None:
            return
        if self.frozen and event in GC_WALKS:
            # Code that walks the collector's objects sees every one, as in a process that never froze any
            # (the walk may be the candidate's search for this reporter: it must find what it always did).
            self.frozen = False
            gc.unfreeze()
        if self._in_hook:
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

    def refused_import(self, name: str, why: str) -> None:
        """The workspace gate refused ``name`` (:mod:`judge_imports`): reported once per run."""
        if IMPORT_FLAG not in self._audit_flags:
            self._audit_flags.add(IMPORT_FLAG)
            self.emit({"kind": "audit", "flag": IMPORT_FLAG, "event": f"import {name[:100]}: {why[:200]}"})

    def emit(self, obj: dict[str, Any]) -> None:
        data = f"{MARK} {json.dumps(obj, sort_keys=True, separators=(',', ':'))}\n".encode()
        while data:
            n = os.write(self._fd, data)
            data = data[n:]

    def start(self, seed: int) -> None:
        self.seed = seed
        self.started = True
        self.emit({"kind": "start"})

    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        random.Random(self.seed).shuffle(items)
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
        if not self.started:  # the job never ran: the host reads the missing start as the judge's fault
            return
        self.emit({"kind": "done", "exitstatus": int(exitstatus), "collected": int(session.testscollected)})


class JobGate:
    """A pytest plugin object: the job arrives at the start of collection, once pytest is configured and its
    session started (plugins imported and registered, fixtures of the plugins parsed), none of which reads
    the job or the workspace."""

    def __init__(self, fd: int, workspace: str, root: str, reporter: Reporter, aliases: list[str]) -> None:
        self._fd = fd
        self._workspace = workspace
        self._aliases = aliases
        self._root = root
        self._reporter = reporter

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: Any) -> None:
        # Everything made so far (pytest's modules, plugins, config, session) lives as long as this process:
        # the collector skips it from here on, so the run's collections (and pytest's at unconfigure) only
        # walk what the tests make. Half of a warm launcher's time after its job went into walking it.
        # The audit hook unfreezes it all as soon as any code asks the collector for its objects.
        gc.freeze()
        self._reporter.frozen = True
        with os.fdopen(self._fd, "rb") as f:
            job = json.loads(f.readline())
        root, workspace = self._root, self._workspace
        _stage(root, dict(job.get("files", {})), dict(job.get("copy", {})))
        paths: list[str] = []
        ignore: list[str] = []
        for arg in job["args"]:
            if arg.startswith(IGNORE):
                ignore.append(os.path.join(root, arg[len(IGNORE) :]))  # removeprefix: Python 3.9+
            elif arg.startswith("-"):
                raise pytest.UsageError(f"the launcher's job may hold no option but {IGNORE}PATH: {arg!r}")
            else:
                paths.append(os.path.join(root, arg))
        if not paths:
            raise pytest.UsageError("the launcher's job names nothing to collect")
        config = session.config
        config.args = paths
        config.option.ignore = ignore or None
        sys.addaudithook(self._reporter.audit)
        import judge_imports  # imported by main() before the job: a lookup here

        judge_imports.source_only(workspace, bool(job.get("allow_binary")), self._aliases)
        here = os.path.dirname(os.path.abspath(__file__))
        judge_imports.gate(workspace, [root, here], self._reporter.refused_import, self._aliases)
        sys.path.append(workspace)
        os.environ["PYTHONPATH"] = workspace  # for test subprocesses; this interpreter is already up
        self._reporter.start(int(job["seed"]))


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
    roots, root = candidate_roots(argv), os.path.abspath(argv[1])
    workspace, aliases = roots[0], roots[1:]  # aliases: the image's paths of the workspace (/testbed)
    job_fd = os.dup(0)  # the job is read from here once pytest is up (JobGate)
    os.set_inheritable(job_fd, False)
    sys.stdin.close()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    report_fd = os.dup(1)
    os.set_inheritable(report_fd, False)
    os.dup2(2, 1)
    os.makedirs(root, exist_ok=True)  # pytest's --rootdir must exist; the probes land here later
    os.chdir(workspace)
    # The launcher's siblings in the judge's directory (not importable outside the sandbox: the
    # package's import-all check imports this module on the host), imported while the launcher waits.
    import judge_imports  # noqa: F401
    import judge_observe

    reporter = Reporter(report_fd, judge_observe.RECORDER, roots)
    gate = JobGate(job_fd, workspace, root, reporter, aliases)
    args = [
        "-c", os.path.join(os.path.dirname(os.path.abspath(__file__)), "pytest.ini"),
        "--rootdir", root, "--noconftest", "-p", "no:cacheprovider", "-p", "no:stepwise",
        "-q", "-o", "addopts=", "-o", "python_files=test_*.py *_test.py", root,
    ]  # fmt: skip
    return int(pytest.main(args, plugins=[reporter, gate]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
