"""The dynamic-test driver's limits, run as the real script in a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import resources
from pathlib import Path

from sparring.tasks.dynamic_format import to_input

DRIVER = Path(str(resources.files("sparring.judge.inside").joinpath("judge_driver.py")))
MODULE = """\
def f(n, xs):
    while n < 0:  # spins on negative n: CPU time the per-call limit counts
        pass
    return {"n": n, "xs": xs}
"""


def _drive(ws: Path, job: dict) -> list[dict]:  # type: ignore[type-arg]
    r = subprocess.run([sys.executable, "-s", str(DRIVER), str(ws)], input=json.dumps(job) + "\n",
                       capture_output=True, text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_tagged_inputs_cross_with_their_types(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(MODULE)
    args = [to_input(1), to_input({(1, 2): b"x", 3: frozenset({1})})]
    out = _drive(tmp_path, {"module": "m", "function": "f", "inputs": [args]})
    assert out == [{"ok": {"dict": sorted([
        ["n", 1],
        ["xs", {"dict": sorted([[{"tuple": [1, 2]}, {"bytes": "78"}], [3, {"frozenset": [1]}]], key=json.dumps)}],
    ], key=json.dumps)}}]  # fmt: skip


def test_per_call_limit_and_budget(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(MODULE)
    inputs = [[1, []], [-1, []], [2, []]]
    job = {"module": "m", "function": "f", "inputs": inputs, "call_timeout_s": 0.2}
    out = _drive(tmp_path, job)
    assert [next(iter(r)) for r in out] == ["ok", "timeout", "ok"]  # the spinning call is cut, the rest run
    out = _drive(tmp_path, {**job, "inputs": [[-1, []]] * 40 + [[1, []]], "budget_s": 1.0})
    assert all("timeout" in r for r in out)  # past the budget nothing more is called, not even the fast one
    assert sum(1 for r in out if r == {"timeout": 0.2}) <= 10 and out[-1] == {"timeout": 1.0}
    # 40 spinning calls would take 8 s of CPU; the 1 s budget stops calling after a handful
