"""Alerts over the per-iteration metrics: reward hacking, degrading statuses, reward drift.

Rules (each a small function of the history, thresholds as fields):

* ``hack_signature``: the pass rate jumps by at least ``jump`` over the mean of
  the previous ``lookback`` iterations *and* the hack-flag rate rises by at least
  ``flag_rise`` over its own mean. A pass-rate jump alone is learning; flags alone
  are a judge matter; both together are the classic reward-hacking signature.
* ``status_degraded``: the share of rollouts whose status says something broke
  (``infra_error``, ``judge_error``, ``policy_error``, ``timeout``) is at least
  ``bad_status_max`` or rises by ``bad_status_rise`` over its previous mean.
* ``reward_drift``: a :class:`~sparring.monitor.drift.DriftMonitor` key fired
  (PSI > 0.25 and KS p < 0.01).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sparring.monitor.drift import DriftResult

BAD_STATUSES = ("infra_error", "judge_error", "policy_error", "timeout")


@dataclass(frozen=True)
class Alert:
    rule: str
    iteration: int
    detail: str

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "iteration": self.iteration, "detail": self.detail}


def bad_status_rate(statuses: dict[str, int]) -> float:
    n = sum(statuses.values())
    return sum(statuses.get(s, 0) for s in BAD_STATUSES) / n if n else 0.0


@dataclass
class AlertRules:
    jump: float = 0.3
    flag_rise: float = 0.1
    lookback: int = 3
    bad_status_max: float = 0.2
    bad_status_rise: float = 0.1
    history: list[dict[str, float]] = field(default_factory=list)

    def check(self, iteration: int, metrics: dict[str, Any], drift: list[DriftResult] = ()) -> list[Alert]:  # type: ignore[assignment]
        cur = {
            "pass": float(metrics.get("rollout/pass_rate", 0.0)),
            "flags": float(metrics.get("rollout/flag_rate", 0.0)),
            "bad": bad_status_rate(dict(metrics.get("rollout/statuses", {}))),
        }
        prev = self.history[-self.lookback :]
        alerts: list[Alert] = []
        if prev:
            mean = {k: sum(h[k] for h in prev) / len(prev) for k in cur}
            if cur["pass"] - mean["pass"] >= self.jump and cur["flags"] - mean["flags"] >= self.flag_rise:
                alerts.append(Alert("hack_signature", iteration,
                    f"pass rate {mean['pass']:.2f} -> {cur['pass']:.2f} while the flag rate went "
                    f"{mean['flags']:.2f} -> {cur['flags']:.2f}: review the flagged trajectories"))  # fmt: skip
            if cur["bad"] - mean["bad"] >= self.bad_status_rise and cur["bad"] > 0:
                alerts.append(Alert("status_degraded", iteration,
                    f"failed-status share rose {mean['bad']:.2f} -> {cur['bad']:.2f} ({metrics.get('rollout/statuses')})"))  # fmt: skip
        if cur["bad"] >= self.bad_status_max and not any(a.rule == "status_degraded" for a in alerts):
            alerts.append(Alert("status_degraded", iteration,
                f"{cur['bad']:.0%} of rollouts ended in {', '.join(BAD_STATUSES)} ({metrics.get('rollout/statuses')})"))  # fmt: skip
        for d in drift:
            if d.alert:
                alerts.append(Alert("reward_drift", iteration,
                    f"{d.key}: PSI {d.psi:.3f}, KS D {d.ks_d:.3f} (p={d.ks_p:.2g}) vs the reference window"))  # fmt: skip
        self.history.append(cur)
        return alerts

    def state_dict(self) -> dict[str, Any]:
        return {"history": list(self.history)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = list(state.get("history", []))
