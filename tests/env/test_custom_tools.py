"""Tools a task declares itself: offered as OpenAI schemas, run by the task's own tool server in
the sandbox, arguments checked against the declared schema (mistakes are observations), rolled
out by the oracle and by random; a malformed declaration is rejected naming the rule."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import tomli_w

from sparring.env import Environment
from sparring.errors import TaskError
from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.scripted import OraclePolicy, RandomPolicy
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.pool import SandboxPool
from sparring.tasks.loader import Task, load_task, write_task
from sparring.tasks.spec import CustomTool, JudgeSpec, Limits, TaskSpec

SPARRING = str(Path(sys.executable).parent / "sparring")
SERVER = """\
import json, sys
CODES = {"alpha": "4711", "beta": "0815"}
args = json.load(sys.stdin)
if sys.argv[-1] == "lookup":
    print(CODES.get(args["word"], "no such word"))
else:
    sys.exit(f"unknown tool {sys.argv[-1]}")
"""
HIDDEN = """\
from pathlib import Path


def test_answer():
    assert Path("answer.txt").read_text().strip() == "4711"
"""
LOOKUP = CustomTool(
    name="lookup",
    description="Look up the code of a word in the codebook.",
    parameters={"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]},
    command="python .tools/codebook.py",
)


def make_codebook_task(out: Path, **spec_updates: Any) -> Task:
    spec = TaskSpec(
        id="codebook", family="tool-use",
        instruction="Use the lookup tool to find the code of the word 'alpha' and write it to answer.txt.",
        success_criteria="answer.txt holds the code of 'alpha' from the codebook, and nothing else.",
        tools=["lookup", "write_file", "read_file", "bash", "submit"], custom_tools=[LOOKUP],
        limits=Limits(max_steps=8), judge=JudgeSpec(hidden_tests=["test_hidden_answer.py::test_answer"]),
    ).model_copy(update=spec_updates)  # fmt: skip
    return write_task(out, spec, workspace={".tools/codebook.py": SERVER, "README.md": "codebook task\n"},
                      hidden={"test_hidden_answer.py": HIDDEN}, solution={"answer.txt": "4711\n"})  # fmt: skip


@pytest.fixture(scope="module")
def codebook(tmp_path_factory) -> Task:
    return make_codebook_task(tmp_path_factory.mktemp("custom") / "codebook")


def call(i: int, name: str, args: Any) -> dict[str, Any]:
    fn = {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": f"c{i}", "type": "function", "function": fn}],
    }


def test_a_declared_tool_is_offered_and_run_by_the_tasks_server(codebook):
    with Environment(codebook) as env:
        obs = env.reset()
        schema = next(t for t in obs.tools if t["function"]["name"] == "lookup")
        assert schema == LOOKUP.function_schema() and "run_tests" not in [
            t["function"]["name"] for t in obs.tools
        ]
        r = env.step(call(0, "lookup", {"word": "alpha"}))
        assert r.messages[0]["content"] == "[exit 0]\n4711\n" and r.info["tool_results"][0]["exit_code"] == 0
        for i, (args, why) in enumerate([({"word": 3}, "must be string"), ({}, "missing required argument"),
                                          ({"word": "a", "x": 1}, "unknown argument"), ("[1]", "JSON object")]):  # fmt: skip
            r = env.step(call(i + 1, "lookup", args))
            assert r.messages[0]["content"].startswith("error:") and why in r.messages[0]["content"], args
        r = env.step(call(9, "write_file", {"path": "answer.txt", "content": "4711\n"}))
        r = env.step(call(10, "submit", {}))
        assert r.terminated and r.reward == 1.0


def test_oracle_and_random_roll_out_a_task_with_its_own_tool(backend, codebook):
    async def go(policy: Any, n: int) -> Any:
        pool = SandboxPool(backend)
        try:
            return await RolloutScheduler(pool, PytestJudge(backend), None, concurrency=2).run(
                [codebook], policy, n
            )
        finally:
            await pool.close()

    oracle = asyncio.run(go(OraclePolicy(), 1))
    assert oracle.statuses == {"ok": 1} and oracle.trajectories[0].reward == 1.0
    rnd = asyncio.run(go(RandomPolicy(), 6))
    assert set(rnd.statuses) <= {"ok", "truncated"} and sum(rnd.statuses.values()) == 6
    lookups = [s for t in rnd.trajectories for s in t.steps if s.name == "lookup"]
    assert lookups and all(s.error is None and s.exit_code == 0 for s in lookups)  # the server really ran
    assert any(s.output.endswith("no such word\n") for s in lookups)


@pytest.mark.parametrize(
    "change, rule_text",
    [
        ({"custom_tools": [{**LOOKUP.model_dump(), "name": "bash"}]}, "shadows a built-in tool"),
        ({"custom_tools": [{**LOOKUP.model_dump(), "parameters": {"type": "array"}}]}, "type object"),
        ({"custom_tools": [{**LOOKUP.model_dump(), "parameters": {"type": "object", "properties": {"w": {}}}}]},
         "needs a JSON type"),
        ({"tools": ["lookup", "search", "submit"]}, "neither built-in nor declared"),
        ({"custom_tools": [LOOKUP.model_dump(), LOOKUP.model_dump()]}, "declared twice"),
        ({"custom_tools": [{**LOOKUP.model_dump(), "command": " "}]}, "command of its tool server"),
    ],
)  # fmt: skip
def test_a_malformed_declaration_is_rejected_naming_the_rule(codebook, tmp_path, change, rule_text):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(codebook.path, bad)
    raw = tomllib.loads((bad / "task.toml").read_text())
    (bad / "task.toml").write_text(tomli_w.dumps({**raw, **change}))
    with pytest.raises(TaskError, match="custom_tool_declaration") as e:
        load_task(bad)
    assert rule_text in str(e.value)


def test_tasks_check_reports_the_rule(codebook, tmp_path):
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(codebook.path, bad)
    raw = tomllib.loads((bad / "task.toml").read_text())
    raw["custom_tools"][0]["name"] = "read_file"
    (bad / "task.toml").write_text(tomli_w.dumps(raw))
    r = subprocess.run(
        [SPARRING, "tasks", "check", str(bad), "--json"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 1, r.stderr
    (problem,) = json.loads(r.stdout)["tasks"][0]["problems"]
    assert problem["rule"] == "spec_valid" and "custom_tool_declaration" in problem["detail"]


def test_a_task_without_custom_tools_keeps_its_digest_and_toml(clamp_task):
    assert "custom_tools" not in (clamp_task.path / "task.toml").read_text()
    assert "custom_tools" not in clamp_task.spec.model_dump(mode="json")
