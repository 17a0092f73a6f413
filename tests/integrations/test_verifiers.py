"""verifiers: Sparring tasks as a verifiers (0.4, v1) environment, run by verifiers' own evaluation loop.

``run_eval`` plays every task against a real OpenAI-compatible HTTP server that
replies from a script (the reference solution's tool calls for one task, an
immediate submit for the other); each episode's tool calls run in a real
sandbox, and the reward verifiers records is the judge's, equal to
`sparring judge score --json` on the same final workspace.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from scripted_openai import ScriptedServer

from integration_support import judge_score_cli, reference_actions
from readme_snippets import snippet
from sparring.tasks.loader import Task

pytestmark = pytest.mark.slow


def text_call(action: dict[str, Any]) -> str:
    fn = action["tool_calls"][0]["function"]
    return (
        "<tool_call>"
        + json.dumps({"name": fn["name"], "arguments": json.loads(fn["arguments"])})
        + "</tool_call>"
    )


def script_for(tasks: list[Task]) -> Any:
    """Solve ``tasks[0]`` with its reference actions; submit every other task untouched."""
    solve = [text_call(a) for a in reference_actions(tasks[0])]
    submit = '<tool_call>{"name": "submit", "arguments": {}}</tool_call>'

    def script(messages: list[dict[str, Any]]) -> str:
        first = str(messages[0]["content"]) if messages else ""
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if tasks[0].spec.instruction in first:
            return solve[min(turn, len(solve) - 1)]
        return submit

    return script


def test_verifiers_eval_loop_rewards_equal_judge_score(repair_tasks, tasks_list, tmp_path, monkeypatch):
    server = ScriptedServer(script_for(tasks_list))
    monkeypatch.setenv("OPENAI_API_KEY", "scripted")
    (tmp_path / "tasks").symlink_to(repair_tasks)
    ns: dict[str, Any] = {"base_url": server.url, "model_name": "scripted"}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(snippet("verifiers"), "README:verifiers", "exec"), ns)
    finally:
        os.chdir(cwd)
        server.stop()
    from sparring.integrations.verifiers import episode_reward

    by_task = {e.task.data.task_id: episode_reward(e) for e in ns["episodes"]}
    assert set(by_task) == {t.id for t in tasks_list} and len(server.requests) >= 3
    solved = judge_score_cli(tasks_list[0].path, tasks_list[0].solution_files()[0], tmp_path / "w0")
    untouched = judge_score_cli(tasks_list[1].path, {}, tmp_path / "w1")
    assert by_task == {tasks_list[0].id: solved["reward"], tasks_list[1].id: untouched["reward"]}
    assert (solved["reward"], untouched["reward"]) == (1.0, 0.0)
