"""Candidate text printed by the CLI cannot drive the reviewer's terminal.

The candidate writes messages, tool arguments and outputs, file names and error texts; `sparring traj
show`, `traj search` and `failures list` print them. Positive control: rich itself passes these escape
sequences through (it escapes markup, not ESC or C1 bytes), so without the guard they reach the
terminal. Containment: through the real CLI, on a pipe and on a forced terminal, no escape sequence of
the candidate's reaches the output; it is shown written out, and rich's own styling still works.
"""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from sparring.store.sqlite import SQLiteStore
from sparring.trajectory import ToolStep, Trajectory

# Clipboard write (OSC 52), window title (OSC 0), cursor up + erase line (hides the line above),
# concealed text (SGR 8), clear screen through an 8-bit CSI, and a right-to-left override.
PAYLOAD = "\x1b]52;c;cHduZWQ=\x07\x1b]0;owned\x1b\\\x1b[1A\x1b[2K\x1b[8mhidden\x9b2J\u202eevil"
LIVE = ("\x1b]52;", "\x1b]0;", "\x1b[1A", "\x1b[2K", "\x1b[8m", "\x9b", "\u202e")
SHOWN = "\\x1b]52;c;cHduZWQ="  # the payload written out, as the reviewer should see it
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own styling: select graphic rendition only


def test_rich_alone_passes_the_payload_through():
    """Positive control: the payload is live at the console layer the CLI prints through."""
    buf = io.StringIO()
    Console(file=buf, width=200).print(Text(PAYLOAD), highlight=False, soft_wrap=True)
    assert all(seq in buf.getvalue() for seq in LIVE if seq != "\x07")


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("term") / "s.db"
    t = Trajectory(
        id="t1", task_id="task-a", task_digest="d" * 64, policy="p", status="ok", reward=0.0,
        flags=["test_tampering"], failing_tests=[f"t.py::test_{PAYLOAD}"], error=f"boom {PAYLOAD}",
        messages=[{"role": "user", "content": "fix it"},
                  {"role": "assistant", "content": PAYLOAD, "tool_calls": [
                      {"id": "c1", "type": "function", "function": {"name": "run", "arguments": PAYLOAD}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": PAYLOAD}],
        steps=[ToolStep(index=0, tool_call_id="c1", name="run", output=PAYLOAD, exit_code=0)],
        diff={"files": {f"f{PAYLOAD}.py": {"text": "x"}}, "deleted": [PAYLOAD]},
    )  # fmt: skip
    with SQLiteStore(path) as s:
        s.put(t)
    return path


def _sparring(*args: str, terminal: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "SPARRING_DEBUG", "COLUMNS")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[2] / "src")
    if terminal:
        env["FORCE_COLOR"], env["TTY_COMPATIBLE"] = "1", "1"
    else:
        env.pop("FORCE_COLOR", None)
    r = subprocess.run([sys.executable, "-m", "sparring.cli.main", *args], capture_output=True, text=True,
                       timeout=120, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
@pytest.mark.parametrize("cmd", [("traj", "show", "t1"), ("traj", "search"), ("failures", "list")])
def test_candidate_escape_sequences_are_shown_never_obeyed(store, cmd, terminal):
    out = _sparring(*cmd, "--store", str(store), terminal=terminal)
    rest = SGR.sub("", out) if terminal else out
    assert not any(seq in out for seq in LIVE), f"a candidate escape sequence reached the terminal: {cmd}"
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f]", rest), "a control character other than rich's SGR"
    if cmd[1] == "show":
        assert SHOWN in out  # the payload is shown, written out
    if terminal:
        assert SGR.search(out), "rich's own styling should still reach a terminal"
