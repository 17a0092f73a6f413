"""Token-in, token-out: a stored multi-turn run of the tiny HF policy exports as exact token sequences.

The check is against the policy's own trace (what ``act`` returned, recorded
in memory as it happened), not against what the store kept: every sampled id
and logprob comes back in place, every other id is the environment's, and no
turn boundary is a mismatch.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from sparring.judge.pytest_judge import PytestJudge  # noqa: E402
from sparring.policy.base import Action, ActRequest  # noqa: E402
from sparring.policy.hf import HFPolicy  # noqa: E402
from sparring.rollout.scheduler import RolloutScheduler  # noqa: E402
from sparring.sandbox.pool import SandboxPool  # noqa: E402
from sparring.store.base import TrajQuery  # noqa: E402
from sparring.store.sqlite import SQLiteStore  # noqa: E402
from sparring.store.tokens import episode_tokens  # noqa: E402
from sparring.trajectory import TokenTrace  # noqa: E402

GROUP = 2
MAX_STEPS = 3


class Recording:
    """The policy, with every action it returned kept by (sample_index, step)."""

    def __init__(self, inner: HFPolicy) -> None:
        self.inner = inner
        self.name = inner.name
        self.seen: dict[tuple[int, int], Action] = {}

    @property
    def version(self) -> int:
        return self.inner.version

    async def act(self, request: ActRequest) -> Action:
        action = await self.inner.act(request)
        self.seen[(request.sample_index, request.step)] = action
        return action

    async def close(self) -> None:
        await self.inner.close()


@pytest.fixture(scope="module")
def run(tiny_model_dir, backend, clamp_task, tmp_path_factory):
    """One stored multi-turn run (GROUP rollouts of up to MAX_STEPS turns) and the policy's own record."""
    path = tmp_path_factory.mktemp("tok") / "s.db"
    policy = Recording(HFPolicy(tiny_model_dir, max_new_tokens=16, seed=4))

    async def go():
        pool = SandboxPool(backend, max_idle=2)
        try:
            sched = RolloutScheduler(
                pool, PytestJudge(backend), SQLiteStore(path), concurrency=2, max_steps=MAX_STEPS
            )
            return await sched.run([clamp_task], policy, GROUP)
        finally:
            await pool.close()

    summary = asyncio.run(go())
    assert summary.stored == GROUP
    return path, policy


def test_exported_sequences_reproduce_every_sampled_token(run, tmp_path):
    path, policy = run
    out = tmp_path / "tokens.jsonl"
    r = subprocess.run(
        [sys.executable, "-m", "sparring.cli.main", "traj", "export", "--store", str(path), "--out", str(out),
         "--tokens", "--json"], capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert (
        report["mismatches"] == 0 and report["trajectories"] == GROUP and report["rows"] == len(rows) == GROUP
    )

    store = SQLiteStore(path, readonly=True)
    turns_checked = 0
    for row in rows:
        traj = store.get(row["id"])
        own = [policy.seen[(traj.sample_index, step)] for step in range(len(traj.traces))]
        assert len(own) >= 2, "a multi-turn episode"
        first = own[0].trace
        assert row["prompt_ids"] == first.prompt_ids
        ids, mask, lps = row["completion_ids"], row["policy_mask"], row["logprobs"]
        assert len(ids) == len(mask) == len(lps)
        pos = 0
        for k, action in enumerate(own):
            t = action.trace
            if k:  # the environment's ids between turns: exactly what the next prompt added, mask 0
                appended = t.prompt_ids[len(row["prompt_ids"]) + pos :]
                assert ids[pos : pos + len(appended)] == appended and not any(mask[pos : pos + len(appended)])
                assert action.usage["prompt_continued"] == 1
                pos += len(appended)
            n = len(t.completion_ids)
            assert ids[pos : pos + n] == t.completion_ids, f"turn {k}: sampled ids must come back exactly"
            assert lps[pos : pos + n] == t.logprobs and all(mask[pos : pos + n])
            pos += n
            turns_checked += 1
        assert pos == len(ids) and sum(mask) == sum(len(a.trace.completion_ids) for a in own)
    store.close()
    assert turns_checked >= 2 * GROUP


def test_parquet_and_dataset_hold_the_same_rows(run, tmp_path):
    pytest.importorskip("pyarrow")
    datasets = pytest.importorskip("datasets")
    import pyarrow.parquet as pq

    from sparring.store.token_export import export_tokens_jsonl, export_tokens_parquet, tokens_dataset

    path, _ = run
    store = SQLiteStore(path, readonly=True)
    q = TrajQuery(limit=None)
    stats = export_tokens_jsonl(store, q, tmp_path / "t.jsonl")
    pstats = export_tokens_parquet(store, q, tmp_path / "t.parquet")
    ds, dstats = tokens_dataset(store, q)
    store.close()
    rows = [json.loads(x) for x in (tmp_path / "t.jsonl").read_text().splitlines()]
    assert stats.to_json() == pstats.to_json() == dstats.to_json() and stats.mismatches == 0
    assert pq.read_table(tmp_path / "t.parquet").to_pylist() == rows
    assert isinstance(ds, datasets.Dataset) and ds.to_list() == rows


def test_a_reencoded_boundary_is_a_counted_mismatch_not_a_guess():
    t0 = TokenTrace(prompt_ids=[1, 2], completion_ids=[3, 4], logprobs=[-0.1, -0.2])
    t1 = TokenTrace(prompt_ids=[1, 2, 3, 4, 9], completion_ids=[5], logprobs=[-0.5])
    t2 = TokenTrace(prompt_ids=[1, 2, 30, 9], completion_ids=[6])  # re-tokenised: 3,4 -> 30
    ep = episode_tokens([t0, t1, t2])
    assert ep.mismatches == 1 and len(ep.segments) == 2
    a, b = ep.segments
    assert (
        a.completion_ids == [3, 4, 9, 5]
        and a.policy_mask == [1, 1, 0, 1]
        and a.logprobs == [-0.1, -0.2, 0.0, -0.5]
    )
    assert (
        b.prompt_ids == [1, 2, 30, 9]
        and b.to_json()["logprobs"] is None
        and a.turns == [0, 1]
        and b.turns == [2]
    )
