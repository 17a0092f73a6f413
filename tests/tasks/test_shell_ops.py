"""The shell-ops family (the demo's family): balanced operations, deterministic bytes, and the
noisy demonstrator's systematic mistakes at the stated rate."""

from __future__ import annotations

import asyncio
import collections
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparring.errors import ConfigError
from sparring.policy.base import ActRequest, PolicyTask
from sparring.policy.demonstrator import NoisyDemonstrator
from sparring.tasks.families import generate
from sparring.tasks.families.shell_ops import OPS, apply_op, op_order, shell_ops_task


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 10**6), start=st.integers(0, 100))
def test_every_eight_consecutive_tasks_cover_every_operation(seed, start):
    ops = [shell_ops_task(i, seed)[0].tags[1] for i in range(start, start + len(OPS))]
    assert sorted(ops) == sorted(f"op:{o}" for o in OPS)


def test_operation_order_depends_on_the_seed():
    orders = {tuple(op_order(s)) for s in range(20)}
    assert len(orders) > 10


def test_the_expected_output_is_the_operation_applied_to_the_data():
    for i in range(16):
        spec, ws, hidden, sol = shell_ops_task(i, 3)
        op = spec.tags[1][3:]
        lines = str(ws["data.txt"]).split()
        assert str(sol["out.txt"]).split() == apply_op(op, lines)
        # every other operation gives a different out.txt on this data: a wrong command never passes
        assert all(apply_op(o, lines) != apply_op(op, lines) for o in OPS if o != op)


def test_same_seed_same_bytes_other_seed_other_tasks(tmp_path):
    a = generate("shell-ops", 8, 5, tmp_path / "a")
    b = generate("shell-ops", 8, 5, tmp_path / "b")
    c = generate("shell-ops", 8, 6, tmp_path / "c")
    assert [t.digest for t in a] == [t.digest for t in b]
    assert {t.digest for t in a}.isdisjoint(t.digest for t in c)


def _first_command(policy: NoisyDemonstrator, task, sample: int) -> str:
    req = ActRequest(task=PolicyTask.of(task), messages=[], tools=[], step=0, sample_index=sample, seed=0)
    msg = asyncio.run(policy.for_task(task).act(req)).message
    return json.loads(msg["tool_calls"][0]["function"]["arguments"])["command"]


def test_demonstrator_mistakes_are_the_partner_at_rate_epsilon(tmp_path):
    tasks = generate("shell-ops", 16, 1, tmp_path / "t")
    for eps, lo, hi in ((0.0, 0.0, 0.0), (1.0, 1.0, 1.0), (0.3, 0.2, 0.4)):
        pol = NoisyDemonstrator(eps, seed=2)
        wrong = collections.Counter()
        for t in tasks:
            op = OPS[t.spec.tags[1][3:]]
            for s in range(8):
                cmd = _first_command(pol, t, s)
                assert cmd in (op.command, OPS[op.partner].command)
                wrong[cmd != op.command] += 1
        rate = wrong[True] / sum(wrong.values())
        assert lo <= rate <= hi, (eps, rate)


def test_demonstrator_forgets_the_output_file_at_its_rate(tmp_path):
    tasks = generate("shell-ops", 16, 1, tmp_path / "t")
    pol = NoisyDemonstrator(0.0, seed=3, forget_output=0.5)
    forgot = collections.Counter()
    for t in tasks:
        op = OPS[t.spec.tags[1][3:]]
        for s in range(8):
            cmd = _first_command(pol, t, s)
            assert cmd in (op.command, op.command.removesuffix(" > out.txt")), cmd
            forgot[cmd != op.command] += 1
    assert 0.4 <= forgot[True] / sum(forgot.values()) <= 0.6
    with pytest.raises(ConfigError, match="forget_output"):
        NoisyDemonstrator(0.1, forget_output=1.5)
