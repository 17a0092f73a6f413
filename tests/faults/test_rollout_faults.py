"""Rollouts under fault: sandboxes killed or hung mid-rollout, a crashing judge, a policy server that
hangs, answers garbage or drops connections. After each, every requested sample is in the store exactly
once with a truthful status, retried ones are marked, and no infrastructure failure has a reward."""

from __future__ import annotations

import asyncio

import pytest
from fault_support import CrashingJudge, FaultyBackend, FaultyPolicyServer, assert_accounted

from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.openai_http import OpenAIPolicy
from sparring.policy.scripted import OraclePolicy
from sparring.rollout.episode import StageLimits
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.pool import SandboxPool
from sparring.store.sqlite import SQLiteStore


def run(backend, judge_backend, store, tasks, policy, group, run_id, **kw):
    async def go():
        pool = SandboxPool(backend, max_idle=2)
        try:
            sched = RolloutScheduler(pool, PytestJudge(judge_backend), store, **kw)
            summary = await sched.run(tasks, policy, group, run_id=run_id)
            # whatever happened (kills, hangs, cancelled spares), no sandbox is left checked out
            assert not pool._live, f"sandboxes still checked out: {pool._live}"
            return summary
        finally:
            await pool.close()

    return asyncio.run(go())


@pytest.mark.parametrize("snapshot_every", [0, 1])
def test_sandbox_killed_mid_rollout_is_retried_and_the_sample_still_passes(
    backend, clamp_task, tmp_path, snapshot_every
):
    faulty = FaultyBackend(backend, fault_on_exec={1})  # SIGKILL the sandbox at its first command (run_tests)
    store = SQLiteStore(tmp_path / "s.db")
    s = run(faulty, backend, store, [clamp_task], OraclePolicy(), 2, "kill", concurrency=1, backoff_s=0.01,
            snapshot_every=snapshot_every)  # fmt: skip
    assert faulty.faults == 1 and s.retried == 1
    trajs = assert_accounted(store, "kill", 2)
    hit = [t for t in trajs if t.attempts == 2]
    assert len(hit) == 1 and all(t.status == "ok" and t.reward == 1.0 for t in trajs)
    t = hit[0]
    assert "SandboxError" in t.infra_errors[0]
    # the conversation was rewound, never duplicated: each oracle step appears once
    assert [st.name for st in t.steps] == ["list_dir", "read_file", "str_replace", "run_tests", "submit"]
    assert [st.index for st in t.steps] == list(range(5))
    # with snapshots the retry continued in a sandbox restored from the last snapshot (after str_replace)
    assert faulty.restored_from_snapshot == (1 if snapshot_every else 0)
    store.close()


def test_hung_exec_server_hits_the_tool_stage_limit_and_is_retried(backend, clamp_task, tmp_path):
    faulty = FaultyBackend(backend, fault_on_exec={1}, mode="hang")  # SIGSTOP the exec server
    store = SQLiteStore(tmp_path / "s.db")
    # The limit also bounds the retry's honest run_tests (pytest in a sandbox): short enough to keep the
    # test quick, long enough for a loaded host. The stopped server never answers, so it always fires.
    s = run(faulty, backend, store, [clamp_task], OraclePolicy(), 1, "hang", concurrency=1, backoff_s=0.01,
            limits=StageLimits(tool_call_s=15.0))  # fmt: skip
    (t,) = assert_accounted(store, "hang", 1)
    assert s.statuses == {"ok": 1} and t.attempts == 2 and t.reward == 1.0
    assert "stage limit" in t.infra_errors[0]
    store.close()


def test_sandboxes_that_keep_dying_end_as_infra_error_with_no_reward(backend, clamp_task, tmp_path):
    faulty = FaultyBackend(
        backend, fault_on_exec=set(range(1, 100))
    )  # every sandbox dies at its first command
    store = SQLiteStore(tmp_path / "s.db")
    s = run(faulty, backend, store, [clamp_task], OraclePolicy(), 2, "doomed", concurrency=2, backoff_s=0.01,
            max_retries=1, replay_rounds=1)  # fmt: skip
    trajs = assert_accounted(store, "doomed", 2)
    assert s.statuses == {"infra_error": 2} and s.replayed == 2
    for t in trajs:
        assert t.reward is None and not t.trainable and t.attempts == 4 and len(t.infra_errors) == 4
    store.close()


def test_crashing_judge_is_retried_then_typed_judge_error(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")

    async def go(crashes, retries):
        pool = SandboxPool(backend)
        judge = CrashingJudge(PytestJudge(backend), crashes)
        try:
            sched = RolloutScheduler(pool, judge, store, concurrency=1, judge_retries=retries)
            return await sched.run([clamp_task], OraclePolicy(), 1, run_id=f"judge{crashes}")
        finally:
            await pool.close()

    s = asyncio.run(go(1, 1))  # crashes once, the retry scores it
    assert s.statuses == {"ok": 1} and s.trajectories[0].reward == 1.0
    s = asyncio.run(go(5, 1))  # keeps crashing
    (t,) = assert_accounted(store, "judge5", 1)
    assert s.statuses == {"judge_error": 1} and t.reward is None and "segfaulted" in (t.error or "")
    assert t.steps and t.diff["files"]  # the rollout itself is kept: it can be re-judged later
    store.close()


@pytest.mark.parametrize("mode", ["hang", "garbage", "drop"])
def test_misbehaving_policy_server_gives_policy_error_never_a_reward(backend, clamp_task, tmp_path, mode):
    store = SQLiteStore(tmp_path / "s.db")
    with FaultyPolicyServer(clamp_task, mode) as srv:
        pol = OpenAIPolicy(srv.url, srv.model, timeout_s=0.5, max_retries=1, backoff_s=0.01)
        s = run(backend, backend, store, [clamp_task], pol, 2, mode, concurrency=2)
    trajs = assert_accounted(store, mode, 2)
    assert s.statuses == {"policy_error": 2}
    assert all(t.reward is None and not t.steps for t in trajs)
    assert srv.completions >= 2
    store.close()


def test_policy_server_dropping_every_other_request_is_absorbed_by_client_retries(
    backend, clamp_task, tmp_path
):
    store = SQLiteStore(tmp_path / "s.db")
    with FaultyPolicyServer(clamp_task, "flaky") as srv:
        pol = OpenAIPolicy(srv.url, srv.model, timeout_s=60, max_retries=2, backoff_s=0.01)
        s = run(backend, backend, store, [clamp_task], pol, 1, "flaky", concurrency=1)
    (t,) = assert_accounted(store, "flaky", 1)
    assert s.statuses == {"ok": 1} and t.reward == 1.0 and srv.completions == 10  # 5 turns, each dropped once


def test_spares_complete_a_group_whose_member_keeps_failing(backend, clamp_task, tmp_path):
    faulty = FaultyBackend(backend, fault_on_exec={1, 2})  # the first sample's sandbox dies twice
    store = SQLiteStore(tmp_path / "s.db")
    s = run(faulty, backend, store, [clamp_task], OraclePolicy(), 2, "spares", concurrency=1, max_retries=1,
            backoff_s=0.01, spares=1, replay_rounds=0)  # fmt: skip
    total, trajs = store.search(
        __import__("sparring.store.base", fromlist=["TrajQuery"]).TrajQuery(run_id="spares")
    )
    ok = [t for t in trajs if t.status == "ok"]
    assert len(ok) == 2 and {t.status for t in trajs} == {"ok", "infra_error"} and total == 3
    assert s.statuses == {"ok": 2, "infra_error": 1}
    store.close()


class _SlowPolicy(OraclePolicy):
    """Stalls on its second turn for far longer than the turn limit (a model server that hangs)."""

    name = "slow"

    async def act(self, request):
        if sum(m["role"] == "assistant" for m in request.messages) >= 1:
            await asyncio.sleep(600)
        return await super().act(request)


class _SlowJudge:
    version = "slow/1"

    async def score(self, task, diff):
        await asyncio.sleep(600)  # never answers within the stage limit


def test_policy_turn_and_judge_stage_limits_type_the_overrun(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    # the first, honest turn must fit the limit too: 3 s, not a tight 0.3 s
    s = run(backend, backend, store, [clamp_task], _SlowPolicy(), 1, "slowpol", concurrency=1,
            limits=StageLimits(policy_turn_s=3.0))  # fmt: skip
    (t,) = assert_accounted(store, "slowpol", 1)
    assert s.statuses == {"policy_error": 1} and "policy turn exceeded 3s" in (t.error or "")
    assert len(t.steps) == 1 and t.reward is None

    async def go():
        pool = SandboxPool(backend)
        try:
            sched = RolloutScheduler(
                pool, _SlowJudge(), store, limits=StageLimits(judge_s=0.3), judge_retries=1
            )
            return await sched.run([clamp_task], OraclePolicy(), 1, run_id="slowjudge")
        finally:
            await pool.close()

    s = asyncio.run(go())
    (t,) = assert_accounted(store, "slowjudge", 1)
    assert s.statuses == {"judge_error": 1} and "judge exceeded its 0.3s stage limit" in (t.error or "")
    assert t.submitted and t.reward is None
    store.close()


def test_exported_rows_carry_the_tools_each_trajectory_was_offered(backend, clamp_task, tmp_path):
    import json

    from sparring.store.base import TrajQuery
    from sparring.store.export import export_jsonl

    store = SQLiteStore(tmp_path / "s.db")
    run(backend, backend, store, [clamp_task], OraclePolicy(), 1, "exp", concurrency=1)
    export_jsonl(store, TrajQuery(run_id="exp", limit=None), tmp_path / "out.jsonl")
    (row,) = [json.loads(x) for x in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert {t["function"]["name"] for t in row["tools"]} >= {"bash", "str_replace", "submit"}
    assert [m["role"] for m in row["messages"]][:3] == ["system", "user", "assistant"] and row[
        "reward"
    ] == 1.0
    store.close()


def test_malformed_text_tool_call_from_a_real_server_is_answered_not_fatal(backend, clamp_task, tmp_path):
    store = SQLiteStore(tmp_path / "s.db")
    with FaultyPolicyServer(clamp_task, "malformed_first") as srv:
        pol = OpenAIPolicy(srv.url, srv.model, timeout_s=60, max_retries=0)
        s = run(backend, backend, store, [clamp_task], pol, 1, "malformed", concurrency=1)
    (t,) = assert_accounted(store, "malformed", 1)
    assert s.statuses == {"ok": 1} and t.reward == 1.0
    hints = [m["content"] for m in t.messages if m["role"] == "user"][1:]
    assert hints and hints[0].startswith("Your tool call could not be parsed")
    assert all("parse_errors" not in m for m in t.messages)
    store.close()


class _StragglerOracle(OraclePolicy):
    """The oracle, except sample 0 of every group stalls for ten minutes on its second turn."""

    async def act(self, request):
        if request.sample_index == 0 and request.step == 1:
            await asyncio.sleep(600)
        return await super().act(request)


def test_a_straggler_does_not_stall_its_group_when_spares_are_provisioned(backend, clamp_task, tmp_path):
    import time

    store = SQLiteStore(tmp_path / "s.db")
    t0 = time.monotonic()
    s = run(
        backend, backend, store, [clamp_task], _StragglerOracle(), 2, "straggler", concurrency=3, spares=1
    )
    # the group finished without waiting for its straggler (a liveness bound far below its 600 s stall)
    assert time.monotonic() - t0 < 300
    total, trajs = store.search(
        __import__("sparring.store.base", fromlist=["TrajQuery"]).TrajQuery(run_id="straggler")
    )
    assert s.statuses == {"ok": 2} and s.cancelled_spares == 1 and total == s.stored == 2
    assert sorted(t.sample_index for t in trajs) == [
        1,
        2,
    ]  # the straggler (index 0) was cancelled, not stored
    store.close()


class _SparseOracle(OraclePolicy):
    """The oracle, after first making a 1.5 GiB sparse file (no blocks) in a workspace of 256 MiB."""

    def plan(self, request):
        return [
            ("bash", {"command": "truncate -s 1536M big.bin && stat -c %s big.bin"}),
            *super().plan(request),
        ]


def test_a_workspace_beyond_its_quota_scores_zero_with_a_flag_never_infra_error(
    backend, clamp_task, tmp_path
):
    """The host refuses to carry a diff beyond the quota (apparent sizes) and to snapshot it: the rollout
    is not retried nor left unscored (the policy would escape its penalty), it scores 0 with the flag.
    The next rollout on the same backend is unaffected."""
    store = SQLiteStore(tmp_path / "s.db")
    s = run(
        backend, backend, store, [clamp_task], _SparseOracle(), 1, "sparse", concurrency=1, snapshot_every=1
    )
    (t,) = assert_accounted(store, "sparse", 1)
    assert t.steps[0].output.split()[-1] == str(1536 << 20)  # positive control: the sparse file was made
    assert t.status == "ok" and t.reward == 0.0 and t.flags == ["workspace_too_large"]
    assert t.attempts == 1 and t.infra_errors == [] and s.retried == 0
    assert t.diff["flags"] == ["workspace_too_large"] and t.diff["files"] == {}
    run(backend, backend, store, [clamp_task], OraclePolicy(), 1, "after", concurrency=1)
    (after,) = assert_accounted(store, "after", 1)
    assert after.status == "ok" and after.reward == 1.0
    store.close()
