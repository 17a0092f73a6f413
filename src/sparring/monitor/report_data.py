"""What a run report draws, read from the run's metrics JSONL: one :class:`Series` per chart line.

Pure data: no plotting library and no HTML here, so the extraction is testable on its own
and the charts module only draws. A metrics log holds two kinds of rows: RL iterations
(``rollout/...`` keys, one per iteration) and evaluations (``eval/...`` keys, e.g. the
held-out pass rate before and after RL).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError

# The stages an iteration's wall time is split into (seconds per iteration, summed over its rollouts
# for policy/tools/judge; the update is the trainer step).
STAGES = ("policy", "tools", "judge", "update")


def find_metrics(run: str, workdir: Path | None = None) -> Path:
    """The metrics JSONL of RUN (a file, a workdir, or a run id under workdir)."""
    p = Path(run)
    if p.is_file():
        return p
    if p.is_dir():
        files = sorted((p / "metrics").glob("*.jsonl"), key=lambda f: f.stat().st_mtime)
        if not files:
            raise ConfigError(
                f"{p} holds no run metrics (no metrics/*.jsonl): pass a run's workdir or metrics file"
            )
        return files[-1]
    if workdir is not None and (workdir / "metrics" / f"{run}.jsonl").is_file():
        return workdir / "metrics" / f"{run}.jsonl"
    raise ConfigError(
        f"run not found: {run} (pass a metrics .jsonl file, a run workdir, or a run id with --workdir)"
    )


def load_rows(path: Path, warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The log's rows. A torn last line (what a kill mid-write leaves) is skipped with a warning;
    a bad line before it means the file is not a metrics log."""
    rows = []
    lines = [(i, ln) for i, ln in enumerate(path.read_text(errors="replace").splitlines(), 1) if ln.strip()]
    for n, (i, line) in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if n == len(lines) - 1 and rows:
                if warn is not None:
                    warn(f"{path}:{i}: skipped a torn last line (the run was stopped while writing it)")
                break
            raise ConfigError(
                f"{path}:{i} is not a JSON line: the file is not a sparring metrics log"
            ) from None
    if not rows:
        raise ConfigError(f"{path} has no iterations yet")
    return rows


# What only an optimizer step produces: an iteration that skipped its update has none of them.
UPDATE_KEYS = frozenset({"train/loss", "train/grad_norm", "train/clip_frac", "train/kl"})


def _is_iteration(row: dict[str, Any]) -> bool:
    return any(k.startswith("rollout/") for k in row)


@dataclass
class Series:
    """One line (or bar group) of a chart: x values (iterations) and y values."""

    label: str
    x: list[float]
    y: list[float]

    def __len__(self) -> int:
        """The points drawn (a gap is not one)."""
        return sum(1 for v in self.y if not math.isnan(v))


@dataclass
class RunData:
    """Everything the report draws, extracted from one metrics log."""

    run: str
    iterations: list[dict[str, Any]]
    evals: list[dict[str, Any]]
    heldout: dict[str, float] = field(default_factory=dict)  # before_rl / after_rl pass rates
    control: dict[str, float] = field(default_factory=dict)  # the same from a --no-rl control run

    @property
    def steps(self) -> list[float]:
        return [float(r.get("step", i)) for i, r in enumerate(self.iterations)]

    def series(self, key: str, label: str | None = None) -> Series:
        """The iterations that logged ``key`` (a number), as a series. An update metric
        (:data:`UPDATE_KEYS`) of an iteration whose update was skipped is a gap (NaN), never a 0."""
        xs, ys = [], []
        for x, r in zip(self.steps, self.iterations, strict=True):
            v = r.get(key)
            if isinstance(v, int | float) and not isinstance(v, bool):
                xs.append(x)
                skipped = key in UPDATE_KEYS and r.get("train/skipped") == 1.0
                ys.append(math.nan if skipped else float(v))
        return Series(label or key, xs, ys)

    def first(self, *keys: str, label: str) -> Series:
        """The first of ``keys`` that any iteration logged (new names first, older names after)."""
        for k in keys:
            s = self.series(k, label)
            if len(s):
                return s
        return Series(label, [], [])

    def grouped(self, prefix: str, keep: Callable[[str], bool] = lambda name: True) -> list[Series]:
        """One series per ``prefix + name`` key (``rollout/pass_rate/`` -> tier1, tier2, a family...)."""
        names = sorted({k[len(prefix):] for r in self.iterations for k in r
                        if k.startswith(prefix) and "/" not in k[len(prefix):]})  # fmt: skip
        return [self.series(prefix + n, n) for n in names if keep(n)]

    def statuses(self) -> list[Series]:
        """Samples per status per iteration (stacked bars)."""
        names = sorted({s for r in self.iterations for s in (r.get("rollout/statuses") or {})})
        return [
            Series(
                n, self.steps, [float((r.get("rollout/statuses") or {}).get(n, 0)) for r in self.iterations]
            )
            for n in names
        ]

    def stage_seconds(self) -> list[Series]:
        """Seconds per stage per iteration; an iteration without a stage's timing counts 0."""
        out = []
        for st in STAGES:
            s = Series(st, self.steps, [float(r.get(f"timing_s/{st}", 0.0) or 0.0) for r in self.iterations])
            if any(s.y):
                out.append(s)
        return out

    def reward_groups(self) -> dict[str, list[float]]:
        """Rewards of the first, middle and last iterations (histograms)."""
        rewards = [list(r.get("rollout/rewards") or []) for r in self.iterations]
        if not rewards:
            return {}
        picks = sorted({0, len(rewards) // 2, len(rewards) - 1})
        return {
            f"iteration {int(self.steps[i])}": [float(x) for x in rewards[i]] for i in picks if rewards[i]
        }

    def psi(self) -> list[Series]:
        return [s for s in self.grouped("monitor/drift_psi/") if len(s)]

    def alerts(self) -> Series:
        return Series("alerts", self.steps, [float(r.get("monitor/alerts", 0) or 0) for r in self.iterations])


def heldout_from_evals(evals: list[dict[str, Any]]) -> dict[str, float]:
    """``{before_rl, after_rl}`` pass rates from the log's ``eval/heldout/...`` rows."""
    out: dict[str, float] = {}
    for r in evals:
        for phase in ("before_rl", "after_rl"):
            v = r.get(f"eval/heldout/{phase}/pass_rate")
            if isinstance(v, int | float):
                out[phase] = float(v)
    return out


def skill_from_evals(evals: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{before_rl: {inspect_first, pass_if_inspect, ...}, after_rl: ...}`` from the log's held-out rows
    (families that teach looking before acting log ``eval/heldout/PHASE/skill/KEY``; others: empty)."""
    out: dict[str, dict[str, float]] = {}
    for r in evals:
        for phase in ("before_rl", "after_rl"):
            prefix = f"eval/heldout/{phase}/skill/"
            got = {k.removeprefix(prefix): float(v) for k, v in r.items() if k.startswith(prefix)
                   and isinstance(v, int | float)}  # fmt: skip
            if got:
                out[phase] = got
    return out


def load_run(
    metrics: Path, control: Path | None = None, warn: Callable[[str], None] | None = None
) -> RunData:
    """A run's report data; ``control`` is the metrics log of its --no-rl control run, if any."""
    rows = load_rows(metrics, warn)
    its = [r for r in rows if _is_iteration(r)]
    evals = [r for r in rows if not _is_iteration(r) and any(k.startswith("eval/") for k in r)]
    if not its and not evals:
        raise ConfigError(f"{metrics} has no iterations yet")
    data = RunData(metrics.stem, its, evals, heldout=heldout_from_evals(evals))
    if control is not None:
        data.control = heldout_from_evals(load_rows(control, warn))
    return data
