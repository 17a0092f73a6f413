"""The process checks' part of the golden set: frozen trajectories and the verdicts the checks gave.

``golden_process.json`` holds conversations recorded from real rollouts
(scripted agents working well and badly in real sandboxes, see
``tests/judge/test_process_checks.py``): each case's messages, tool calls, the
tools offered and the initial workspace's file names, with the process
components and flags the checks gave. ``sparring judge regress`` replays them
beside the workspace cases (:mod:`sparring.judge.quality.golden`); a changed verdict
fails the run, and ``--update`` re-records the verdicts on the same inputs. The
file is apart from ``golden.json`` so the workspace verdicts never move with it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

from sparring import atomicfile
from sparring.errors import ConfigError
from sparring.judge.process import ProcessInput, Step, process_components, process_flags, run_checks

FORMAT = 1


def golden_process_path() -> Path:
    return Path(str(resources.files("sparring.judge.quality").joinpath("golden_process.json")))


def case_input(case: dict[str, Any]) -> ProcessInput:
    return ProcessInput(
        messages=case["messages"], steps=[Step.from_json(s) for s in case["steps"]],
        tools=frozenset(case["tools"]), initial_files=frozenset(case["initial_files"]),
    )  # fmt: skip


def process_verdict(p: ProcessInput) -> dict[str, Any]:
    findings = run_checks(p)
    return {"components": process_components(findings), "flags": sorted(process_flags(findings))}


def record_case(name: str, traj: Any, tools: Iterable[str], initial_files: Iterable[str]) -> dict[str, Any]:
    """A golden case from a stored trajectory (a :class:`sparring.trajectory.Trajectory`: its conversation
    frozen, its verdict recorded now)."""
    case = {"name": name, "task": traj.task_id, "messages": traj.messages,
            "steps": [s.model_dump(mode="json") for s in traj.steps], "tools": sorted(tools),
            "initial_files": sorted(initial_files)}  # fmt: skip
    return {**case, "verdict": process_verdict(case_input(case))}


def load_process_golden(path: Path | None = None) -> dict[str, Any]:
    p = path or golden_process_path()
    if not p.is_file():
        return {"format": FORMAT, "cases": []}
    try:
        data: dict[str, Any] = json.loads(p.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"process golden set {p} is not JSON: {e}") from None
    if data.get("format") != FORMAT:
        raise ConfigError(f"process golden set {p}: format {data.get('format')!r}, want {FORMAT}")
    return data


def replay_process(data: dict[str, Any]) -> tuple[int, list[dict[str, Any]], dict[str, Any]]:
    """(cases, changed, the data with the verdicts recomputed) for the frozen process cases."""
    changed: list[dict[str, Any]] = []
    cases = []
    for c in data.get("cases", []):
        got = process_verdict(case_input(c))
        if got != c["verdict"]:
            changed.append({"task": c["task"], "workspace": f"process:{c['name']}", "why": "process verdict changed",
                            "expected": c["verdict"], "got": got})  # fmt: skip
        cases.append({**c, "verdict": got})
    return len(cases), changed, {**data, "cases": cases}


def write_process_golden(path: Path, data: dict[str, Any]) -> None:
    atomicfile.write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")
