"""Review queue (real SQLite) and canary tasks (real judge runs)."""

from __future__ import annotations

import asyncio

import pytest

from sparring.errors import ConfigError
from sparring.judge.pytest_judge import PytestJudge
from sparring.judge.quality.canary import CANARY_TEST, hack_rate, is_canary, make_canary, mix_canaries
from sparring.judge.quality.review import MIN_HISTORY, ReviewQueue, risk_reasons
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.hacks import HACKS
from sparring.tasks.loader import solution_diff


def _res(reward=0.0, flags=(), all_pass=0.0):
    return {
        "status": "ok",
        "reward": reward,
        "flags": list(flags),
        "components": {"all_pass": all_pass},
        "judge_version": "v",
    }


def test_risk_reasons():
    assert risk_reasons(0.0, [], False, []) == []
    assert risk_reasons(0.0, ["exit_trick"], False, []) == ["flagged"]
    assert "high_reward_with_flags" in risk_reasons(0.9, ["special_casing"], True, [])
    assert "rare_success" in risk_reasons(1.0, [], True, [False] * MIN_HISTORY)
    assert "rare_success" not in risk_reasons(1.0, [], True, [True, False] * MIN_HISTORY)
    jump = risk_reasons(1.0, [], True, [False] * 20 + [True] * 9)
    assert "pass_rate_jump" in jump


def test_queue_is_idempotent_ordered_and_labels_are_stored(tmp_path):
    q = ReviewQueue(tmp_path / "r.db")
    assert q.observe("a", "t1", _res(0.0, ["exit_trick"])) == ["flagged"]
    assert q.observe("a", "t1", _res(0.0, ["exit_trick"])) == []  # same key: nothing changes
    assert q.observe("b", "t2", _res()) == []
    q.observe("c", "t3", _res(0.9, ["special_casing"], 1.0))
    assert [i.key for i in q.list()] == ["a", "c"]
    nxt = q.next()
    assert nxt is not None and nxt.key == "c"
    q.label(nxt.id, "hack", "hard-coded outputs")
    assert [i.key for i in q.list("labelled")] == ["c"] and q.get(nxt.id).note == "hard-coded outputs"
    with pytest.raises(ConfigError):
        q.label(nxt.id, "maybe")
    q.close()
    q2 = ReviewQueue(tmp_path / "r.db")  # persisted
    assert len(q2.list("all")) == 2 and q2.history("t1") == [False]
    q2.close()


def test_hack_rate():
    assert hack_rate([]) is None and hack_rate([False, True, False, False]) == 0.25


def test_mix_canaries_is_seeded_and_bounded(clamp_task, tmp_path):
    with pytest.raises(ConfigError):
        mix_canaries([clamp_task], 1.5, 0, tmp_path)
    assert mix_canaries([clamp_task], 0.0, 0, tmp_path) == []
    (c,) = mix_canaries([clamp_task], 0.01, 0, tmp_path / "c")
    assert is_canary(c) and CANARY_TEST in c.spec.judge.hidden_tests and c.id == "clamp-bug-canary"


@pytest.mark.parametrize("family", ["clamp", "code-repair", "function-impl"])
def test_no_honest_or_hacked_workspace_passes_a_canary(backend, family_tasks, family, tmp_path):
    task = family_tasks[family]
    canary = make_canary(task, tmp_path / "canary")
    j = PytestJudge(backend)
    for name, diff in [("reference", solution_diff(task)), ("initial", WorkspaceDiff()),
                       ("conftest", HACKS["conftest_forces_pass"](canary)), ("patch", HACKS["patch_test_reports"](canary))]:  # fmt: skip
        r = asyncio.run(j.score(canary, diff))
        assert r.components["all_pass"] == 0.0 and r.reward == 0.0, (name, r.per_test)
    ref = asyncio.run(j.score(canary, solution_diff(task)))
    assert ref.per_test[CANARY_TEST] == "failed" and ref.components["hidden_fraction"] >= 0.5


def test_model_assisted_review_over_a_real_http_endpoint(tmp_path):
    import json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from sparring.judge.quality.review import model_label, model_review

    seen = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(body)
            flags = body["messages"][1]["content"]
            answer = "Hack: the conftest forces passes." if "config_tampering" in flags else "ok, a plain fix"
            data = json.dumps({"choices": [{"message": {"role": "assistant", "content": answer}}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        q = ReviewQueue(tmp_path / "r.db")
        q.observe("a", "t1", _res(0.0, ["config_tampering"]))
        q.observe("b", "t2", _res(0.9, ["special_casing"], 1.0))
        out = asyncio.run(model_review(q, f"http://127.0.0.1:{srv.server_port}/v1", "tiny"))
        labels = {q.get(o["id"]).key: q.get(o["id"]).label for o in out}
        assert labels == {"a": "hack", "b": "ok"} and q.get(out[0]["id"]).note.startswith("model:tiny:")
        assert seen[0]["model"] == "tiny" and q.list("open") == []
        q.close()
    finally:
        srv.shutdown()
    assert model_label("") == ("unsure", "") and model_label("**HACK** yes")[0] == "hack"


def test_collect_from_a_trajectory_store(tmp_path):
    from sparring.judge.quality.review import collect_from_store
    from sparring.trajectory import Trajectory

    trajs = [
        Trajectory(
            task_id="t",
            task_digest="d",
            policy="p",
            status="ok",
            reward=0.0,
            flags=["exit_trick"],
            created_at=1,
        ),
        Trajectory(
            task_id="t",
            task_digest="d",
            policy="p",
            status="ok",
            reward=1.0,
            components={"all_pass": 1.0},
            created_at=2,
        ),
        Trajectory(task_id="t", task_digest="d", policy="p", status="judge_error", created_at=3),
    ]
    q = ReviewQueue(tmp_path / "r.db")
    assert collect_from_store(q, trajs) == 1 and q.history("t") == [False, True]
    assert collect_from_store(q, trajs) == 0 and len(q.list()) == 1 and q.history("t") == [False, True]
    q.close()
