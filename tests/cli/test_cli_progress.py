"""Progress on stderr: plain whole lines when stderr is not a terminal (a log file, CI), never
wrapped at 80 columns; rich bars with counts and ETA on a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
from pathlib import Path

EXE = Path(sys.executable).parent / "sparring"


def test_tasks_generate_logs_plain_progress_lines_when_piped(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    r = subprocess.run([str(EXE), "tasks", "generate", "shell-ops", "--n", "12", "--seed", "3", "--no-check",
                        "--out", str(tmp_path / "t")], capture_output=True, text=True, timeout=300, env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == "generating shell-ops tasks: 0/12"
    assert any(ln.startswith("generating shell-ops tasks: 12/12 done in ") for ln in lines)
    assert "\x1b[" not in r.stderr  # no escape codes in a log


def test_bars_in_plain_mode_log_each_tenth_and_the_end(capsys):
    from sparring.cli.progress import Bars

    with Bars() as bars:
        assert not bars.live
        bars.start("x", 100, "rollouts")
        for _ in range(100):
            bars.advance("x")
        bars.finish("x")
        bars.log("iteration 0: reward 0.500, statuses " + " ".join(f"status{i}:{i}" for i in range(30)))
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "rollouts: 0/100" and err[-2].startswith("rollouts: 100/100 done in ")
    assert [ln.split(" (")[0] for ln in err[1:-2]] == [f"rollouts: {10 * i}/100" for i in range(1, 10)]
    assert err[-1].endswith("status29:29")  # one line, however long


def test_a_terminal_gets_a_bar_with_count_and_eta(tmp_path):
    """Under a pseudo-terminal the same command draws a rich bar: count, elapsed time, ETA."""
    pid, fd = pty.fork()
    if pid == 0:  # child: stdout and stderr are the pty
        os.execv(str(EXE), [str(EXE), "tasks", "generate", "shell-ops", "--n", "5", "--seed", "1",
                            "--no-check", "--out", str(tmp_path / "t")])  # fmt: skip
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    assert os.waitstatus_to_exitcode(status) == 0, text[-2000:]
    assert "generating shell-ops tasks" in text and "5/5" in text and "eta" in text and "\x1b[" in text


def test_an_interrupted_batch_says_where_it_stopped_not_done(capsys):
    """Ctrl-C during an iteration's rollouts: the bar ends at 2/16 "stopped", never "16/16 done"."""
    import asyncio
    import contextlib

    from sparring.cli.progress import Bars
    from sparring.train.evaluation import evaluate

    class Interrupted:  # the scheduler as Ctrl-C leaves it: two samples done, then cancelled
        async def run(self, tasks, policy, samples, *, run_id, seed):
            bars.advance("rollouts", 2)
            raise asyncio.CancelledError

    with Bars() as bars, contextlib.suppress(asyncio.CancelledError):
        asyncio.run(evaluate(Interrupted(), [object()] * 4, None, "r", 0, 4, bars, "iteration 1 rollouts"))  # type: ignore[arg-type]
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith("iteration 1 rollouts: 2/16 stopped in "), last
