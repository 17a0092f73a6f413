"""Reward-distribution drift: compare the current window with a reference window.

Two tests, both pure functions of two samples:

* **PSI** (population stability index) over fixed reward bins::

      PSI = sum_b (p_b - q_b) * ln(p_b / q_b)

  with p the current and q the reference bin fractions over 5 equal bins of
  [0, 1], add-half smoothed (``(count + 0.5) / (n + 2.5)``) so a rare bin
  cannot blow up the log. Conventional reading: < 0.1 stable, 0.1-0.25
  moderate shift, > 0.25 major shift.
* **Two-sample Kolmogorov-Smirnov** statistic ``D = sup_x |F_cur(x) - F_ref(x)|``
  with the asymptotic p-value ``Q_KS(sqrt(n_e) * D)``, ``n_e = n m / (n + m)``.

An alert needs both: ``PSI > 0.25`` (a major shift in size) *and* KS
``p < 0.01`` (not a sampling accident of small windows). With 128-sample
windows a stable stream stays well below both; a pass-rate move of 0.3 -> 0.9
exceeds both by far (tests/monitor/test_drift.py).

A :class:`DriftMonitor` keeps the first ``reference_size`` rewards of each key
(family and judge version) as its reference, compares every later window
against it, and reports an alert when either test fires. Rewards of an RL run
*should* rise; drift alerts are a prompt to look (together with the hack flags),
which is why :mod:`sparring.monitor.alerts` combines them.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Sequence
from dataclasses import dataclass

PSI_ALERT = 0.25
KS_P_ALERT = 0.01
DEFAULT_BINS: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)  # 5 bins: PSI noise ~ (bins-1)(1/n+1/m)


def _hist(xs: Sequence[float], edges: Sequence[float]) -> list[float]:
    """Add-half smoothed fractions per bin; values outside the edges go to the end bins."""
    k = len(edges) - 1
    counts = [0] * k
    for x in xs:
        i = 0
        while i < k - 1 and x >= edges[i + 1]:
            i += 1
        counts[i] += 1
    return [(c + 0.5) / (len(xs) + 0.5 * k) for c in counts]


def psi(reference: Sequence[float], current: Sequence[float], edges: Sequence[float] = DEFAULT_BINS) -> float:
    """Population stability index of ``current`` against ``reference`` (0 = identical bins)."""
    if not reference or not current:
        return 0.0
    q = _hist(reference, edges)
    p = _hist(current, edges)
    return float(sum((pi - qi) * math.log(pi / qi) for pi, qi in zip(p, q, strict=True)))


def _ks_q(lam: float) -> float:
    """Kolmogorov's survival function Q(lam) = 2 sum_k (-1)^(k-1) exp(-2 k^2 lam^2)."""
    if lam < 1e-3:
        return 1.0
    total = 0.0
    for k in range(1, 101):
        term = 2 * (-1) ** (k - 1) * math.exp(-2 * k * k * lam * lam)
        total += term
        if abs(term) < 1e-12:
            break
    return min(max(total, 0.0), 1.0)


def ks_2samp(reference: Sequence[float], current: Sequence[float]) -> tuple[float, float]:
    """(D, p-value) of the two-sample Kolmogorov-Smirnov test (asymptotic p, Stephens' correction)."""
    a, b = sorted(reference), sorted(current)
    n, m = len(a), len(b)
    if not n or not m:
        return 0.0, 1.0
    i = j = 0
    d = 0.0
    while i < n and j < m:
        x = min(a[i], b[j])
        while i < n and a[i] <= x:
            i += 1
        while j < m and b[j] <= x:
            j += 1
        d = max(d, abs(i / n - j / m))
    ne = n * m / (n + m)
    lam = (math.sqrt(ne) + 0.12 + 0.11 / math.sqrt(ne)) * d
    return d, _ks_q(lam)


@dataclass(frozen=True)
class DriftResult:
    key: str
    psi: float
    ks_d: float
    ks_p: float
    n_reference: int
    n_current: int

    @property
    def alert(self) -> bool:
        return self.psi > PSI_ALERT and self.ks_p < KS_P_ALERT


class DriftMonitor:
    """Per-key reference windows (first ``reference_size`` values) and sliding current windows."""

    def __init__(self, reference_size: int = 128, window: int = 128, min_current: int = 32) -> None:
        self.reference_size = reference_size
        self.window = window
        self.min_current = min_current
        self.reference: dict[str, list[float]] = defaultdict(list)
        self.current: dict[str, deque[float]] = defaultdict(lambda: deque(maxlen=window))

    def add(self, key: str, values: Sequence[float]) -> None:
        for v in values:
            ref = self.reference[key]
            if len(ref) < self.reference_size:
                ref.append(float(v))
            else:
                self.current[key].append(float(v))

    def check(self) -> list[DriftResult]:
        out = []
        for key, ref in sorted(self.reference.items()):
            cur = list(self.current.get(key, ()))
            if len(ref) < self.reference_size or len(cur) < self.min_current:
                continue
            d, p = ks_2samp(ref, cur)
            out.append(DriftResult(key, psi(ref, cur), d, p, len(ref), len(cur)))
        return out

    def state_dict(self) -> dict[str, object]:
        return {"reference": dict(self.reference), "current": {k: list(v) for k, v in self.current.items()}}

    def load_state_dict(self, state: dict[str, object]) -> None:
        self.reference = defaultdict(list, {k: list(v) for k, v in dict(state["reference"]).items()})  # type: ignore[call-overload]
        self.current = defaultdict(lambda: deque(maxlen=self.window))
        for k, v in dict(state["current"]).items():  # type: ignore[call-overload]
            self.current[k] = deque(v, maxlen=self.window)
