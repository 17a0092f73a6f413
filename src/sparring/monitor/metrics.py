"""Per-iteration metrics (slash-named, like ``rollout/reward_mean``) and sinks.

``iteration_metrics`` is a pure function of the iteration's trajectories; a
sink only writes. The JSONL sink appends one object per iteration and flushes,
so a crash loses at most the line being written.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from sparring.rollout.trajectory import Trajectory


def iteration_metrics(trajs: Sequence[Trajectory], seconds: float) -> dict[str, Any]:
    n = len(trajs)
    statuses = Counter(t.status for t in trajs)
    by_family: dict[str, list[float]] = defaultdict(list)
    judged = [t.reward for t in trajs if t.reward is not None]  # unjudged samples have no reward, not 0
    for t in trajs:
        if t.reward is not None:
            by_family[t.family].append(t.reward)
    tool_calls = sum(len(t.steps) for t in trajs)
    tokens = sum(len(tr.get("completion_ids", [])) for t in trajs for tr in t.traces)
    m: dict[str, Any] = {
        "rollout/n": n,
        "rollout/reward_mean": sum(judged) / len(judged) if judged else 0.0,
        "rollout/unjudged": n - len(judged),
        "rollout/pass_rate": sum(1 for t in trajs if t.passed) / n if n else 0.0,
        "rollout/flag_rate": sum(1 for t in trajs if t.flags) / n if n else 0.0,
        "rollout/statuses": dict(statuses),
        "rollout/tool_calls": tool_calls,
        "rollout/tokens": tokens,
        "rollout/seconds": seconds,
        "rollout/throughput_per_min": (60.0 * n / seconds) if seconds > 0 else 0.0,
    }
    for fam, rs in by_family.items():
        m[f"rollout/reward_mean/{fam}"] = sum(rs) / len(rs)
    return m


class MetricsSink(Protocol):
    def log(self, step: int, metrics: dict[str, Any]) -> None: ...

    def close(self) -> None: ...


class JsonlSink:
    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._f = self.path.open("a")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self._f.write(json.dumps({"step": step, **metrics}, default=str) + "\n")
        self._f.flush()

    def close(self) -> None:
        self._f.close()


class NullSink:
    def log(self, step: int, metrics: dict[str, Any]) -> None:
        return None

    def close(self) -> None:
        return None
