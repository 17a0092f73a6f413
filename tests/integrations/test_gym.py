"""Gymnasium: the wrapper passes gymnasium's own environment checker, and a text loop solves a task.

The loop sends the reference solution as raw model text (the Sparring chat
template's ``<tool_call>`` form, what a text policy samples) and gets the
judge's reward; random text from the action space is an observation, never a crash.
"""

from __future__ import annotations

import json
import os

import pytest
from gymnasium.utils.env_checker import check_env

from integration_support import reference_actions
from readme_snippets import snippet
from sparring.chat_format import render_assistant
from sparring.integrations.gym import SparringGymEnv

pytestmark = pytest.mark.slow


def test_gymnasium_env_checker_passes(repair_tasks):
    env = SparringGymEnv(repair_tasks)
    try:
        check_env(env, skip_render_check=True)
    finally:
        env.close()
    assert env.env is None


def test_a_text_loop_solves_a_task_with_the_judges_reward(repair_tasks, tasks_list):
    task = tasks_list[1]
    env = SparringGymEnv(repair_tasks)
    obs, info = env.reset(seed=0, options={"task_id": task.id})
    assert json.loads(obs)[0]["role"] == "system" and info["task_id"] == task.id
    assert (
        env.observation_space.contains(obs) and [t["function"]["name"] for t in info["tools"]][-1] == "submit"
    )
    obs, reward, terminated, truncated, info = env.step("I will look around first.")  # no tool call
    assert not terminated and reward == 0.0 and "No tool call" in json.loads(obs)[0]["content"]
    for action in reference_actions(task):
        obs, reward, terminated, truncated, info = env.step(render_assistant(action))
        assert env.observation_space.contains(obs)
    assert terminated and not truncated and reward == 1.0 and info["status"] == "ok"
    assert (
        info["tests"]["failed"] == 0 and env.env is not None and env.env.sandbox is None
    )  # freed when judged
    env.close()


def test_the_readme_snippet_runs(repair_tasks, tmp_path):
    (tmp_path / "tasks").symlink_to(repair_tasks)
    ns: dict = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        exec(compile(snippet("gym"), "README:gym", "exec"), ns)
    finally:
        os.chdir(cwd)
    assert ns["terminated"] and ns["info"]["status"] == "ok" and ns["reward"] == 0.0  # submitted unchanged
    assert ns["env"].env is None  # closed
