"""The Environment as an outside loop sees it: reset, step with tool calls, read the reward.

The loop of README's "The Environment" section is run as it is written (sync and
async) on a generated code-repair task, and its reward, components and per-test
report are compared with `sparring judge score` run as a real CLI subprocess on
the same final workspace.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sparring.env import Budgets, Environment, SampledTurn
from sparring.errors import EnvironmentUsageError
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.families import generate
from sparring.tasks.loader import load_task
from sparring.trajectory import TokenTrace

SPARRING = [str(Path(sys.executable).parent / "sparring")]


def call(i: int, name: str, **args: Any) -> dict[str, Any]:
    """One assistant message making one tool call."""
    fn = {"name": name, "arguments": json.dumps(args)}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}],
    }


def reference_actions(task_dir: Path) -> list[dict[str, Any]]:
    """The tool calls that write the task's reference solution files."""
    files, deleted = load_task(task_dir).solution_files()
    assert not deleted
    return [
        call(i, "write_file", path=p, content=b.decode()) for i, (p, b) in enumerate(sorted(files.items()))
    ]


@pytest.fixture(scope="module")
def repair_task(tmp_path_factory) -> Path:
    (task,) = generate("code-repair", 1, 0, tmp_path_factory.mktemp("env") / "tasks")
    return task.path


def final_workspace(task_dir: Path, diff: WorkspaceDiff, out: Path) -> Path:
    """The task's initial workspace with the episode's final diff applied."""
    shutil.copytree(task_dir / "workspace", out)
    for rel, data in diff.files.items():
        (out / rel).parent.mkdir(parents=True, exist_ok=True)
        (out / rel).write_bytes(data)
    for rel in diff.deleted:
        (out / rel).unlink()
    return out


def judge_score_cli(task_dir: Path, workspace: Path) -> dict[str, Any]:
    r = subprocess.run([*SPARRING, "judge", "score", "--task", str(task_dir), "--workspace", str(workspace),
                        "--json"], capture_output=True, text=True, timeout=300, env=os.environ.copy())  # fmt: skip
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def assert_same_judgement(res: Any, cli: dict[str, Any]) -> None:
    assert res.reward == cli["reward"] == 1.0
    # what is deterministic must be equal: ``efficiency`` is the test run's measured wall time, and
    # ``usage`` (what the episode spent) exists only with an episode, which the CLI does not have
    # ``usage`` (what the episode spent) and the process checks (``process/<check>``, how it went) exist
    # only with an episode, which the CLI does not have
    timing = {"efficiency", "usage"}
    outcome = {k: v for k, v in res.info["components"].items() if not k.startswith("process/")}
    mine = {k: v for k, v in outcome.items() if k not in timing}
    assert mine == {k: v for k, v in cli["components"].items() if k not in timing}
    assert set(outcome) == set(cli["components"]) | {"usage"}
    assert any(k.startswith("process/") for k in res.info["components"])
    assert res.info["per_test"] == cli["per_test"] and res.info["tests"] == cli["tests"]
    assert [f for f in res.info["flags"] if not f.startswith("process/")] == cli["flags"] == []
    assert all(v == "passed" for v in cli["per_test"].values()) and cli["per_test"]


def test_ten_line_loop_solves_a_code_repair_task_like_judge_score(repair_task, tmp_path):
    actions = reference_actions(repair_task)
    # -- the outside loop (README), 10 lines: ------------------------------------------------
    from sparring.env import Environment

    env = Environment.from_task(repair_task)
    obs = env.reset(seed=0)
    for action in actions:
        env.step(action)
    res = env.step(call(99, "submit"))
    print(res.reward, res.info["components"], res.info["per_test"])
    env.close()
    # ----------------------------------------------------------------------------------------
    assert [t["function"]["name"] for t in obs.tools][-1] == "submit" and obs.messages[0]["role"] == "system"
    assert res.terminated and not res.truncated and res.info["status"] == "ok"
    assert env.diff is not None and set(env.diff.files) == {p for a in actions for p in [_path(a)]}
    assert_same_judgement(
        res, judge_score_cli(repair_task, final_workspace(repair_task, env.diff, tmp_path / "w"))
    )


def _path(action: dict[str, Any]) -> str:
    return str(json.loads(action["tool_calls"][0]["function"]["arguments"])["path"])


def test_the_same_loop_async(repair_task, tmp_path):
    actions = reference_actions(repair_task)

    async def loop() -> tuple[Any, Environment]:
        async with Environment.from_task(repair_task) as env:
            await env.areset(seed=0)
            for action in actions:
                await env.astep(action)
            return await env.astep(call(99, "submit")), env

    res, env = asyncio.run(loop())
    assert res.terminated and env.sandbox is None  # the context manager closed it
    assert env.diff is not None
    assert_same_judgement(
        res, judge_score_cli(repair_task, final_workspace(repair_task, env.diff, tmp_path / "w"))
    )


def test_unknown_tools_and_bad_arguments_are_observations(clamp_task):
    with Environment.from_task(clamp_task.path) as env:
        env.reset()
        r = env.step(call(0, "rm_rf", path="/"))
        assert (
            not r.done
            and r.messages[0]["role"] == "tool"
            and "unknown tool 'rm_rf'" in r.messages[0]["content"]
        )
        bad = call(1, "write_file")
        bad["tool_calls"][0]["function"]["arguments"] = "{not json"
        r = env.step(bad)
        assert "arguments are not valid JSON" in r.messages[0]["content"]
        r = env.step(call(2, "read_file", path=7))
        assert "must be a string" in r.messages[0]["content"]
        r = env.step({"role": "assistant", "content": "I think I am done."})
        assert (
            r.messages == [{"role": "user", "content": r.messages[0]["content"]}]
            and "No tool call" in r.messages[0]["content"]
        )
        assert r.info["tool_results"] == [] and not r.done
        assert [s["error"] is not None for s in env.steps[0:3] for s in [s.model_dump()]] == [
            True,
            True,
            True,
        ]


def test_step_budget_truncates_and_the_episode_is_still_judged(clamp_task):
    with Environment.from_task(clamp_task.path, max_steps=2) as env:
        env.reset()
        files, _ = clamp_task.solution_files()
        ((rel, data),) = files.items()
        r1 = env.step(call(0, "write_file", path=rel, content=data.decode()))
        assert not r1.done and r1.reward is None
        assert r1.info["status"] == "running"  # no final status while the episode still runs
        r2 = env.step(call(1, "list_dir", path="."))
        assert r2.truncated and not r2.terminated and r2.info["status"] == "truncated"
        assert r2.reward == 1.0 and r2.info["tests"]["passed"] == 4  # judged on what it left
        with pytest.raises(EnvironmentUsageError, match="reset"):
            env.step(call(2, "submit"))


def test_wall_budget_ends_as_timeout(clamp_task):
    with Environment.from_task(clamp_task.path, wall_s=1.0) as env:
        env.reset()
        r = env.step(call(0, "bash", command="sleep 1.5"))
        assert r.truncated and r.info["status"] == "timeout" and r.reward == 0.0


def test_a_tool_call_past_its_timeout_is_an_observation(clamp_task):
    # 5 s (not 1) so a loaded host reaches "echo started" before the timeout; the sleep outlasts any wait
    with Environment.from_task(clamp_task.path, exec_timeout_s=5.0) as env:
        env.reset()
        t0 = time.monotonic()
        r = env.step(call(0, "bash", command="echo started; sleep 300", timeout=5))
        assert time.monotonic() - t0 < 150 and not r.done  # a liveness bound: it did not wait for the sleep
        assert "started" in r.messages[0]["content"] and "[timed out after 5s]" in r.messages[0]["content"]


def test_long_observations_are_cut_with_a_marker_and_kept_whole_in_info(clamp_task):
    budgets = Budgets.for_task(clamp_task, observation_chars=200)
    with Environment(clamp_task, budgets=budgets) as env:
        env.reset()
        r = env.step(call(0, "bash", command="python -c \"print('y' * 5000)\""))
        seen, full = r.messages[0]["content"], r.info["tool_results"][0]["output"]
        assert "more characters truncated; the full output is stored" in seen and len(seen) < 400
        assert full.count("y") == 5000 and r.info["tool_results"][0]["observation_truncated"]


def test_sampled_text_with_token_ids_is_parsed_and_its_tokens_kept(clamp_task):
    with Environment.from_task(clamp_task.path) as env:
        env.reset()
        text = '<tool_call>{"name": "list_dir", "arguments": {"path": "."}}</tool_call>'
        r = env.step(SampledTurn(text, TokenTrace(prompt_ids=[1, 2], completion_ids=[5, 6, 7])))
        assert r.messages[0]["role"] == "tool" and "mathx" in r.messages[0]["content"]
        assert env.traces == [
            TokenTrace(turn=0, message_index=2, prompt_ids=[1, 2], completion_ids=[5, 6, 7])
        ]
        assert env.messages[2]["role"] == "assistant" and env.usage().tokens == 3


def test_sync_form_inside_a_running_loop_says_to_use_the_async_form(clamp_task):
    env = Environment.from_task(clamp_task.path)

    async def inside() -> None:
        with pytest.raises(EnvironmentUsageError, match="await env.areset"):
            env.reset()

    asyncio.run(inside())
    with pytest.raises(EnvironmentUsageError, match="reset"):
        env.step(call(0, "submit"))
