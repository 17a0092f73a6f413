"""Replaying the judge's golden set (and review-labelled cases): did any verdict move?

``sparring judge regress`` and the Python API share this: the CLI parses its
flags and prints :func:`run_regress`'s report. The golden set
(:mod:`sparring.judge.quality.golden`) freezes tasks and workspaces with the verdict the
judge gave; replaying it with the current judge must give the same verdicts.
``update`` re-records them on the same frozen inputs, ``rebuild`` regenerates the
inputs first. Labelled cases (``sparring review export``) are replayed too: a
workspace labelled ``hack`` must score 0, one labelled ``ok`` keep its reward.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError
from sparring.judge.quality.golden import (
    RegressReport,
    fresh_cases,
    frozen_cases,
    golden_path,
    replay,
    replay_labelled,
    write_golden,
)
from sparring.judge.quality.golden_process import (
    golden_process_path,
    load_process_golden,
    replay_process,
    write_process_golden,
)
from sparring.sandbox.base import SandboxBackend


def process_golden_for(golden: Path) -> Path:
    """The process cases beside ``golden``: the packaged ones for the packaged set, else
    ``<name>.process.json`` next to a golden file given with ``--golden``."""
    if golden == golden_path():
        return golden_process_path()
    return golden.with_name(golden.stem + ".process.json")


@dataclass(frozen=True)
class RegressOptions:
    """What to replay: the golden set at ``golden`` (default: the packaged one), re-recorded
    (``update``) or regenerated (``rebuild``), plus labelled cases from ``labelled`` whose tasks are
    under ``tasks``; ``only_labelled`` skips the golden set."""

    golden: Path | None = None
    update: bool = False
    rebuild: bool = False
    labelled: Path | None = None
    tasks: Path | None = None
    only_labelled: bool = False
    concurrency: int = 2

    def check(self) -> None:
        """ConfigError naming the flags that cannot go together."""
        if self.only_labelled and (self.labelled is None or self.update or self.rebuild):
            raise ConfigError(
                "--only-labelled needs --labelled and cannot be combined with --update or --rebuild"
            )
        if self.update and self.rebuild:
            raise ConfigError("--update keeps the frozen inputs, --rebuild regenerates them: pass one")

    @property
    def writes(self) -> bool:
        return self.update or self.rebuild


def load_golden(path: Path) -> dict[str, Any]:
    """The golden set file; ConfigError if it is missing or not JSON."""
    if not path.is_file():
        raise ConfigError(f"golden set {path} not found (create it with --rebuild)")
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"golden set {path} is not JSON: {e}") from None
    return data


def run_regress(
    backend: SandboxBackend, opts: RegressOptions, on_case: Callable[[str], None] | None = None
) -> tuple[RegressReport, dict[str, Any]]:
    """Replay what ``opts`` asks for (writing the golden file when it re-records); the report and its
    JSON (with ``golden``, the file, and ``written``). Runs its own event loop."""
    opts.check()
    path = opts.golden or golden_path()
    data = None if opts.rebuild or opts.only_labelled else load_golden(path)
    with tempfile.TemporaryDirectory(prefix="sparring-golden-") as d:
        if opts.only_labelled:
            cases = []
        else:
            cases = fresh_cases(Path(d)) if opts.rebuild else frozen_cases(data or {}, Path(d))
        rep = asyncio.run(
            replay(backend, cases, None if opts.only_labelled else data, concurrency=opts.concurrency,
                   on_case=on_case)
        )  # fmt: skip
        if opts.writes:
            write_golden(path, rep)  # inside the temporary directory: the frozen tasks are still there
    if not opts.only_labelled:  # the process checks' frozen conversations (beside golden.json, never in it)
        ppath = process_golden_for(path)
        pdata = load_process_golden(ppath)
        n, pchanged, recorded = replay_process(pdata)
        rep.cases += n
        if opts.writes:
            if recorded.get("cases"):
                write_process_golden(ppath, recorded)
        else:
            rep.changed += pchanged
    if opts.labelled is not None:
        if opts.tasks is None:
            raise ConfigError("--labelled needs --tasks (where the labelled cases' tasks are)")
        if not opts.labelled.is_file():
            raise ConfigError(
                f"--labelled {opts.labelled} not found (write it with `sparring review export`)"
            )
        lab = asyncio.run(
            replay_labelled(backend, json.loads(opts.labelled.read_text()), opts.tasks, opts.concurrency)
        )
        rep.cases += lab["cases"]
        rep.changed += lab["changed"]
    out = rep.to_json()
    out["golden"] = str(path)
    out["written"] = opts.writes
    return rep, out
