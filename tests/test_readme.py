"""Every shell command in README.md and in the docs pages of DOC_PAGES runs: the fenced shell blocks,
in order (the README first, then the pages as listed), in one scratch directory.

A block is shell when its fence says bash/sh/shell/console or says nothing (```text, ```python
and the like are not). Commands run in one bash process, so a variable one line sets (ID=...)
is there for the next, and a server started with `&` serves the commands after it; each
command's exit status is recorded. Whatever the README holds when the test runs is what runs:
a section added later is covered without touching this file.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from demo_support import CONTROL_ARGS, DEMO_ARGS, SQLITE_SIDE_FILES, DemoRun

ROOT = Path(__file__).resolve().parent.parent
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}
TIMEOUT_S = 3600  # the README runs short trainings, benchmarks and the judge's golden set

# Docs pages whose shell blocks this test runs after the README's (their commands use what the README's
# made: tasks/, runs/s.db, runs/train). Every other page's blocks are text, or run by a test of their own
# (tests/test_docs.py holds that rule).
DOC_PAGES = ("docs/families.md", "docs/rollouts.md", "docs/training.md", "docs/judge.md",
             "docs/tutorials/own-cluster.md")  # fmt: skip
README_MAX_LINES = 300

# Commands that are not run, each with why. Keep this short: a README command that cannot run
# here belongs in prose, not in a shell block.
SKIP = {
    "make demo": "it is `sparring demo` after `make setup`, the full 20-iteration run (tests/test_demo.py runs --quick)",
    "make test": "it would run this test suite from inside itself",
}


def shared_run(cmd: str) -> tuple[str, ...] | None:
    """The arguments of the session's shared demo run ``cmd`` is (tests/demo_support.py), or None.

    `sparring demo --quick` and its control run once per session for the demo, report and README
    tests alike; their workdirs are copied into the README's directory before its commands run, so
    the commands after them (`sparring report ... --control ...`) read the same runs."""
    try:
        argv = shlex.split(cmd, comments=True)
    except ValueError:
        return None
    args = tuple(argv[1:])
    return args if argv and Path(argv[0]).name == "sparring" and args in (DEMO_ARGS, CONTROL_ARGS) else None


def readme_commands(text: str) -> list[str]:
    """The commands of the README's shell blocks, in order (continuation lines joined, comments dropped)."""
    cmds: list[str] = []
    fence: str | None = None
    pending = ""
    for line in text.splitlines():
        m = re.match(r"^\s*```+\s*([\w+-]*)", line)
        if m:
            fence = None if fence is not None else m.group(1).lower()
            continue
        if fence is None or fence not in SHELL_FENCES:
            continue
        s = line.strip()
        if s.startswith("$ "):
            s = s[2:]
        if not pending and (not s or s.startswith("#")):
            continue
        if s.endswith("\\"):
            pending += s[:-1] + " "
            continue
        cmds.append(pending + s)
        pending = ""
    return cmds


def all_commands() -> list[str]:
    """The README's commands, then those of DOC_PAGES, in order."""
    return [c for page in ("README.md", *DOC_PAGES) for c in readme_commands((ROOT / page).read_text())]


def test_readme_is_short_and_opens_with_the_two_commands():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= README_MAX_LINES, (
        "the README is read in five minutes: move detail into docs/"
    )
    assert readme_commands(text)[:2] == ["make demo", "make test"]


def test_readme_commands_are_found():
    cmds = all_commands()
    assert set(SKIP) <= set(cmds), set(SKIP) - set(cmds)  # a skip names a command the README still has
    # the README's two demo commands are the session's shared runs, matched by their arguments
    assert sorted(a for a in map(shared_run, cmds) if a) == sorted([DEMO_ARGS, CONTROL_ARGS])
    assert shared_run("sparring demo --quick --json --seed 1") is None and shared_run("echo 'x") is None
    assert "make demo" in cmds and any(c.startswith(".venv/bin/sparring demo") for c in cmds)
    assert not any(c.startswith(("tasks  =", "from sparring")) for c in cmds)  # text and python blocks


def _scratch(tmp: Path) -> None:
    """A directory that looks like the repository root after `make setup` (.venv, configs, benchmarks)."""
    (tmp / ".venv").symlink_to(Path(sys.prefix))  # the venv running the tests (make setup's .venv)
    for name in ("configs", "benchmarks"):
        (tmp / name).symlink_to(ROOT / name)


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT_S)
def test_every_readme_command_runs(tmp_path, demo_quick: DemoRun, demo_control: DemoRun):
    cmds = [c for c in all_commands() if c not in SKIP and not shared_run(c)]
    work = tmp_path / "repo"
    work.mkdir()
    _scratch(work)
    # the shared runs, as the README's demo commands leave them (both ran from demo_quick.root)
    shutil.copytree(
        demo_quick.root / ".sparring", work / ".sparring", symlinks=True, ignore=SQLITE_SIDE_FILES
    )
    rc_file = tmp_path / "rc"
    lines = ["set +e", f"cd {work}"]
    for i, c in enumerate(cmds):
        lines += [f"echo {shlex.quote(f'@@ [{i}] {c}')}", "__t0=$EPOCHREALTIME", c,
                  f'echo "{i} $? $__t0 $EPOCHREALTIME" >> {rc_file}']  # fmt: skip
    lines += ["kill $(jobs -p) 2>/dev/null", "wait"]  # servers started with &
    venv_bin = (work / ".venv" / "bin").resolve()
    env = {**os.environ, "PATH": f"{venv_bin}:{os.environ['PATH']}"}
    log = tmp_path / "readme.log"
    with log.open("w") as f:
        # its own session: whatever the commands leave running (a server started with &) ends with it
        p = subprocess.Popen(["bash", "-c", "\n".join(lines)], stdout=f, stderr=subprocess.STDOUT, env=env,
                             stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        try:
            p.wait(timeout=TIMEOUT_S - 60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
    rows = [line.split() for line in rc_file.read_text().splitlines()] if rc_file.exists() else []
    codes = {i: rc for i, rc, *_ in rows}
    # each command's seconds, slowest first: where the test's time goes (printed with -rP, kept beside the log)
    took = sorted(((float(end) - float(start), cmds[int(i)]) for i, _, start, end in rows), reverse=True)
    (tmp_path / "seconds.txt").write_text("".join(f"{s:8.1f}  {c}\n" for s, c in took))
    print("".join(f"{s:8.1f}  {c[:100]}\n" for s, c in took[:15]))
    failed = [
        f"[{i}] exit {codes.get(str(i), 'never ran')}: {c}"
        for i, c in enumerate(cmds)
        if codes.get(str(i)) != "0"
    ]
    assert not failed, (
        "README commands failed:\n" + "\n".join(failed) + "\n--- log tail ---\n" + log.read_text()[-6000:]
    )
