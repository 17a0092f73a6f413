"""Per-iteration metrics (slash-named, like ``rollout/reward_mean``) and sinks.

``iteration_metrics`` is a pure function of the iteration's trajectories; a
sink only writes. Sinks: JSONL (always; one object per iteration, flushed, so
a crash loses at most the line being written), TensorBoard (the default
exporter, through tensorboardX when installed), and optional W&B / MLflow when
their packages are installed and the run config names them.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from sparring.trajectory import Trajectory


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def iteration_metrics(
    trajs: Sequence[Trajectory], seconds: float, policy_version: int | None = None
) -> dict[str, Any]:
    """Reward, components, pass rate per family and tier, flags, statuses, tokens, throughput, staleness."""
    n = len(trajs)
    statuses = Counter(t.status for t in trajs)
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[f"{t.family}"].append(t)
        groups[f"tier{t.difficulty}"].append(t)
    judged = [t.reward for t in trajs if t.reward is not None]  # unjudged samples have no reward, not 0
    tool_calls = sum(len(t.steps) for t in trajs)
    tokens = sum(len(tr.get("completion_ids", [])) for t in trajs for tr in t.traces)
    flags = Counter(f for t in trajs for f in t.flags)
    m: dict[str, Any] = {
        "rollout/n": n,
        "rollout/reward_mean": _mean(judged),
        "rollout/unjudged": n - len(judged),
        "rollout/pass_rate": _mean([1.0 if t.passed else 0.0 for t in trajs]),
        "rollout/flag_rate": _mean([1.0 if t.flags else 0.0 for t in trajs]),
        "rollout/statuses": dict(statuses),
        "rollout/tool_calls": tool_calls,
        "rollout/tokens": tokens,
        "rollout/seconds": seconds,
        "rollout/throughput_per_min": (60.0 * n / seconds) if seconds > 0 else 0.0,
        "rollout/tokens_per_s": (tokens / seconds) if seconds > 0 else 0.0,
    }
    for s, c in statuses.items():
        m[f"rollout/status_frac/{s}"] = c / n
    for f, c in flags.items():
        m[f"rollout/flag_frac/{f}"] = c / n
    for key, ts in sorted(groups.items()):
        m[f"rollout/reward_mean/{key}"] = _mean([t.reward for t in ts if t.reward is not None])
        m[f"rollout/pass_rate/{key}"] = _mean([1.0 if t.passed else 0.0 for t in ts])
        comps: dict[str, list[float]] = defaultdict(list)
        for t in ts:
            for c, v in t.components.items():
                comps[c].append(float(v))
        for c, vs in sorted(comps.items()):
            m[f"rollout/component/{c}/{key}"] = _mean(vs)
    if policy_version is not None and trajs:
        lags = [policy_version - t.policy_version for t in trajs]
        m["rollout/staleness_mean"] = _mean([float(x) for x in lags])
        m["rollout/staleness_max"] = float(max(lags))
    return m


def scalars(metrics: dict[str, Any]) -> dict[str, float]:
    """The numeric entries of a metrics dict (nested dicts flattened with '/'), for exporters."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        if isinstance(v, int | float):  # bool too
            out[k] = float(v)
        elif isinstance(v, dict):
            for k2, v2 in scalars(v).items():
                out[f"{k}/{k2}"] = v2
    return out


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


class TensorBoardSink:
    """TensorBoard event files under ``logdir`` (``tensorboard --logdir`` reads them)."""

    def __init__(self, logdir: Path) -> None:
        from tensorboardX import SummaryWriter

        self.logdir = Path(logdir)
        self._w = SummaryWriter(logdir=str(self.logdir), flush_secs=5)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for k, v in scalars(metrics).items():
            self._w.add_scalar(k, v, step)
        self._w.flush()

    def close(self) -> None:
        self._w.close()


class WandbSink:
    def __init__(self, project: str, run_name: str, config: dict[str, Any]) -> None:
        import wandb

        self._run = wandb.init(project=project, name=run_name, config=config)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self._run.log(scalars(metrics), step=step)

    def close(self) -> None:
        self._run.finish()


class MlflowSink:
    def __init__(self, experiment: str, run_name: str) -> None:
        import mlflow

        self._mlflow = mlflow
        mlflow.set_experiment(experiment)
        mlflow.start_run(run_name=run_name)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        self._mlflow.log_metrics({k.replace("/", "."): v for k, v in scalars(metrics).items()}, step=step)

    def close(self) -> None:
        self._mlflow.end_run()


class MultiSink:
    def __init__(self, sinks: Sequence[MetricsSink]) -> None:
        self.sinks = list(sinks)

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        for s in self.sinks:
            s.log(step, metrics)

    def close(self) -> None:
        for s in self.sinks:
            s.close()


class NullSink:
    def log(self, step: int, metrics: dict[str, Any]) -> None:
        return None

    def close(self) -> None:
        return None


def make_sinks(exporters: Sequence[str], run_dir: Path, run_id: str, config: dict[str, Any]) -> MultiSink:
    """JSONL always, plus each named exporter (``tensorboard``, ``wandb``, ``mlflow``)."""
    from sparring.errors import ConfigError

    sinks: list[MetricsSink] = [JsonlSink(run_dir / "metrics" / f"{run_id}.jsonl")]
    for name in exporters:
        try:
            if name == "tensorboard":
                sinks.append(TensorBoardSink(run_dir / "tensorboard" / run_id))
            elif name == "wandb":
                sinks.append(WandbSink("sparring", run_id, config))
            elif name == "mlflow":
                sinks.append(MlflowSink("sparring", run_id))
            else:
                raise ConfigError(f"unknown exporter {name!r}: choose from tensorboard, wandb, mlflow")
        except ImportError as e:
            raise ConfigError(f"exporter {name!r} needs a package that is not installed ({e.name}); "
                              f"install it or drop it from monitor.exporters") from None  # fmt: skip
    return MultiSink(sinks)
