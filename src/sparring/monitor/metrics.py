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


def sampled_tool_calls(t: Trajectory) -> int:
    """The tool calls the policy sampled in ``t``: all of a root's; of a forked branch only those after
    its ``branch_turn`` (its first turns are its parent's conversation, counted there)."""
    if not t.branch_turn:
        return len(t.steps)
    turns = [m for m in t.messages if m.get("role") == "assistant"]
    shared = sum(len(m.get("tool_calls") or []) for m in turns[: t.branch_turn])
    return max(0, len(t.steps) - shared)


def iteration_metrics(
    trajs: Sequence[Trajectory], seconds: float, policy_version: int | None = None,
    max_new_tokens: int | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Reward, components, pass rate per family and tier, flags, statuses, tokens, throughput, staleness,
    response lengths, entropy and time per stage (``max_new_tokens``: the per-turn limit, for the
    share of turns that hit it)."""
    n = len(trajs)
    statuses = Counter(t.status for t in trajs)
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for t in trajs:
        groups[f"{t.family}"].append(t)
        groups[f"tier{t.difficulty}"].append(t)
    judged = [t.reward for t in trajs if t.reward is not None]  # unjudged samples have no reward, not 0
    tool_calls = sum(len(t.steps) for t in trajs)
    tokens = sum(len(tr.completion_ids) for t in trajs for tr in t.traces)
    flags = Counter(f for t in trajs for f in t.flags)
    m: dict[str, Any] = {
        "rollout/n": n,
        "rollout/reward_mean": _mean(judged),
        "rollout/unjudged": n - len(judged),
        "rollout/pass_rate": _mean([1.0 if t.passed else 0.0 for t in trajs]),
        "rollout/flag_rate": _mean([1.0 if t.outcome_flags else 0.0 for t in trajs]),  # the hack signal
        "rollout/process_flag_rate": _mean([1.0 if t.process_flags else 0.0 for t in trajs]),
        "rollout/statuses": dict(statuses),
        "rollout/tool_calls": tool_calls,
        "rollout/sampled_tool_calls": sum(sampled_tool_calls(t) for t in trajs),  # the sampling cost
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
            for comp, v in t.components.items():
                comps[comp].append(float(v))
        for comp, vs in sorted(comps.items()):
            m[f"rollout/component/{comp}/{key}"] = _mean(vs)
    m.update(response_metrics(trajs, max_new_tokens))
    m.update(stage_seconds(trajs))
    if len(judged) > 1:
        mu = m["rollout/reward_mean"]
        m["rollout/reward_std"] = (sum((r - mu) ** 2 for r in judged) / len(judged)) ** 0.5
    elif judged:
        m["rollout/reward_std"] = 0.0
    if policy_version is not None and trajs:
        lags = [policy_version - t.policy_version for t in trajs]
        m["rollout/staleness_mean"] = _mean([float(x) for x in lags])
        m["rollout/staleness_max"] = float(max(lags))
    return m


def response_metrics(trajs: Sequence[Trajectory], max_new_tokens: int | None = None) -> dict[str, float]:
    """Sampled tokens per assistant turn (mean, max, min, share at the limit) and the policy's entropy.

    The entropy is the Monte Carlo estimate from the stored sampling logprobs: the mean of
    ``-log p(token)`` over sampled tokens, whose expectation is the entropy of the sampling
    distribution (no extra forward pass). Turns without a token trace (scripted or API policies)
    count for nothing here."""
    lengths = [len(tr.completion_ids) for t in trajs for tr in t.traces]
    lps = [x for t in trajs for tr in t.traces for x in (tr.logprobs or [])]
    m: dict[str, float] = {}
    if lengths:
        m["response_length/mean"] = _mean([float(x) for x in lengths])
        m["response_length/max"] = float(max(lengths))
        m["response_length/min"] = float(min(lengths))
        if max_new_tokens:
            m["response_length/clip_ratio"] = _mean([1.0 if n >= max_new_tokens else 0.0 for n in lengths])
    if lps:
        m["actor/entropy"] = -_mean(lps)
    return m


# Milliseconds a trajectory spent per stage (rollout.episode's timings) -> the report's stage names.
_STAGE_KEYS = {"policy_ms": "policy", "tool_ms": "tools", "judge_ms": "judge"}


def stage_seconds(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """Seconds spent per stage, summed over the iteration's rollouts (``timing_s/...``, verl's names)."""
    tot: dict[str, float] = defaultdict(float)
    for t in trajs:
        for k, stage in _STAGE_KEYS.items():
            v = t.timings.get(k)
            if isinstance(v, int | float):
                tot[stage] += v / 1000.0
    return {f"timing_s/{k}": v for k, v in tot.items()}


# The same numbers under the names TRL's GRPOTrainer and verl log, so dashboards built for them work.
PARITY_ALIASES: dict[str, tuple[str, ...]] = {
    "rollout/reward_mean": ("reward", "critic/score/mean"),
    "rollout/reward_std": ("reward_std", "critic/score/std"),
    "actor/entropy": ("entropy",),
    "response_length/mean": ("completions/mean_length",),
    "response_length/max": ("completions/max_length",),
    "response_length/min": ("completions/min_length",),
    "response_length/clip_ratio": ("completions/clipped_ratio",),
    "train/loss": ("loss", "actor/pg_loss"),
    "train/kl": ("kl", "actor/ppo_kl"),
    "train/clip_frac": ("clip_ratio", "actor/pg_clipfrac"),
    "train/grad_norm": ("grad_norm", "actor/grad_norm"),
    "actor/lr": ("learning_rate",),
    "timing_s/policy": ("timing_s/gen",),
    "timing_s/update": ("timing_s/update_actor",),
}


def with_aliases(metrics: dict[str, Any]) -> dict[str, Any]:
    """``metrics`` plus each known metric again under its TRL and verl names (existing keys win)."""
    out = dict(metrics)
    for key, names in PARITY_ALIASES.items():
        if key in metrics:
            for n in names:
                out.setdefault(n, metrics[key])
    return out


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
