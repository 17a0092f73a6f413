"""Drift detection on synthetic reward streams: a shift is caught, a stable stream raises no alert."""

from __future__ import annotations

import random

import pytest

from sparring.monitor.alerts import AlertRules
from sparring.monitor.drift import PSI_ALERT, DriftMonitor, ks_2samp, psi


def _stream(rng, p, n):
    return [1.0 if rng.random() < p else 0.0 for _ in range(n)]


def test_psi_by_hand():
    # reference: half in the first bin, half in the last; current: 3/4 and 1/4
    ref = [0.0] * 50 + [1.0] * 50
    cur = [0.0] * 75 + [1.0] * 25
    import math

    # 5 bins, add-half smoothing: counts (50, 0, 0, 0, 50) and (75, 0, 0, 0, 25) over n + 2.5
    q = [50.5 / 102.5, 0.5 / 102.5, 0.5 / 102.5, 0.5 / 102.5, 50.5 / 102.5]
    p = [75.5 / 102.5, 0.5 / 102.5, 0.5 / 102.5, 0.5 / 102.5, 25.5 / 102.5]
    expected = sum((a - b) * math.log(a / b) for a, b in zip(p, q, strict=True))
    assert psi(ref, cur) == pytest.approx(expected, rel=1e-9)
    assert psi(ref, ref) == pytest.approx(0.0, abs=1e-9)


def test_ks_statistic_by_hand():
    d, p = ks_2samp([0.1, 0.2, 0.3, 0.4], [0.35, 0.45, 0.55, 0.65])
    assert d == pytest.approx(0.75)
    assert 0 < p < 1
    d, p = ks_2samp([0.5] * 20, [0.5] * 20)
    assert d == 0.0 and p == 1.0


@pytest.mark.parametrize("seed", range(5))
def test_a_stable_stream_raises_no_alert(seed):
    rng = random.Random(seed)
    mon = DriftMonitor(reference_size=128, window=128)
    alerts = 0
    for _ in range(30):  # 30 windows checked, rewards from the same distribution
        mon.add("fam@v1", [rng.betavariate(2, 5) for _ in range(16)])
        alerts += sum(r.alert for r in mon.check())
    assert alerts == 0


@pytest.mark.parametrize("seed", range(5))
def test_a_shift_is_caught_within_a_window(seed):
    rng = random.Random(seed)
    mon = DriftMonitor(reference_size=128, window=128)
    mon.add("fam@v1", _stream(rng, 0.3, 128))
    mon.add("fam@v1", _stream(rng, 0.3, 32))
    assert not any(r.alert for r in mon.check())
    mon.add("fam@v1", _stream(rng, 0.9, 128))  # pass rate 0.3 -> 0.9
    res = mon.check()
    assert res and res[0].alert and res[0].psi > PSI_ALERT


def test_hack_signature_needs_both_a_pass_jump_and_rising_flags():
    rules = AlertRules(jump=0.3, flag_rise=0.1)
    base = {"rollout/pass_rate": 0.2, "rollout/flag_rate": 0.0, "rollout/statuses": {"ok": 10}}
    for i in range(3):
        assert rules.check(i, base) == []
    learning = {**base, "rollout/pass_rate": 0.7}  # a jump alone is learning
    assert rules.check(3, learning) == []
    r2 = AlertRules(jump=0.3, flag_rise=0.1)
    for i in range(3):
        r2.check(i, base)
    hacked = {**base, "rollout/pass_rate": 0.7, "rollout/flag_rate": 0.3}
    assert [a.rule for a in r2.check(3, hacked)] == ["hack_signature"]


def test_degrading_statuses_alert():
    rules = AlertRules()
    assert rules.check(0, {"rollout/statuses": {"ok": 20}}) == []
    alerts = rules.check(1, {"rollout/statuses": {"ok": 14, "infra_error": 6}})
    assert [a.rule for a in alerts] == ["status_degraded"]
