"""Token traces already in users' stores load unchanged (issue 36: one TokenTrace record end to end).

``tests/data/trajectory_hf_rollout.json`` is a trajectory record exactly as the SQLite store of
commit 218d6cd wrote it, before the trace was a typed record: ``sparring rollout --policy hf:M
--max-steps 3 --max-new-tokens 24`` of a random-init tiny model (``sparring model build --hidden
32``) on ``code-repair-minimat-f8d114b8`` (``tasks generate code-repair --n 1 --seed 0``), its
``record`` column read back with sqlite3. Three turns, each trace placed (``turn``,
``message_index``), each prompt continuing the previous turn's exact ids.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from sparring.store.sqlite import SQLiteStore
from sparring.store.tokens import episode_tokens
from sparring.trajectory import TokenTrace, Trajectory

RECORD = Path(__file__).resolve().parents[1] / "data" / "trajectory_hf_rollout.json"


def _stored_record(db: Path, traj_id: str) -> str:
    conn = sqlite3.connect(db)
    try:
        (record,) = conn.execute(
            "SELECT r.record FROM traj_records AS r JOIN trajectories AS t ON r.seq = t.seq WHERE t.id = ?",
            (traj_id,),
        ).fetchone()
        return str(record)
    finally:
        conn.close()


def test_a_record_stored_before_typed_traces_loads_as_token_traces_and_is_rewritten_byte_for_byte(tmp_path):
    old = RECORD.read_text()
    t = Trajectory.model_validate(json.loads(old))
    assert len(t.traces) == 3 and all(isinstance(tr, TokenTrace) for tr in t.traces)
    assert [(tr.turn, tr.message_index) for tr in t.traces] == [(0, 2), (1, 4), (2, 6)]
    for tr in t.traces:
        assert tr.message_index is not None and t.messages[tr.message_index]["role"] == "assistant"
        assert tr.prompt_ids and len(tr.completion_ids) == len(tr.logprobs or ()) == 24
    ep = episode_tokens(t)  # the stored ids still line up turn after turn: one exact sequence
    assert ep.mismatches == 0 and len(ep.segments) == 1 and ep.sampled_tokens == 72

    with SQLiteStore(tmp_path / "s.db") as store:
        store.put(t)
        assert store.get(t.id) == t
    assert _stored_record(tmp_path / "s.db", t.id) == old  # the same bytes as the old store wrote
    old_keys = [list(d) for d in json.loads(old)["traces"]]
    assert old_keys == [["turn", "message_index", "prompt_ids", "completion_ids", "logprobs"]] * 3
    assert [list(tr.model_dump(mode="json")) for tr in t.traces] == old_keys


def test_top_logprobs_reach_the_caller_but_are_never_stored():
    tr = TokenTrace(
        prompt_ids=[1], completion_ids=[2], logprobs=[-0.1], top_logprobs=[[(2, -0.1), (3, -2.5)]]
    )
    assert tr.top_logprobs == [[(2, -0.1), (3, -2.5)]]
    placed = tr.placed(0, 2)
    assert placed.top_logprobs == tr.top_logprobs and (placed.turn, placed.message_index) == (0, 2)
    assert placed.model_dump(mode="json") == {
        "turn": 0, "message_index": 2, "prompt_ids": [1], "completion_ids": [2], "logprobs": [-0.1],
    }  # fmt: skip
