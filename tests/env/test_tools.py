"""Agent tools against a real sandbox: good calls work, bad calls become error observations."""

from __future__ import annotations

import asyncio
import json

import pytest

from sparring.env.tools import TOOL_SCHEMAS, ToolExecutor, tool_schemas, truncate_observation
from sparring.sandbox.base import SandboxSpec
from tests_support import HANG_S

ALL = list(TOOL_SCHEMAS)


@pytest.fixture
def ex(backend, clamp_task):
    sb = asyncio.run(backend.create(SandboxSpec(workspace=clamp_task.workspace)))
    yield ToolExecutor(sb, ALL, exec_timeout=HANG_S)  # bounds a hang only (run_tests: pytest)
    asyncio.run(sb.close())


def call(ex, name, args):
    return asyncio.run(ex.run(name, json.dumps(args) if isinstance(args, dict) else args))


def test_schemas_are_openai_functions():
    for s in tool_schemas(ALL):
        assert s["type"] == "function" and s["function"]["parameters"]["type"] == "object"
        assert set(s["function"]["parameters"]["required"]) <= set(s["function"]["parameters"]["properties"])


def test_read_write_replace_list(ex):
    assert "def clamp" in call(ex, "read_file", {"path": "mathx/core.py"}).output
    assert call(ex, "read_file", {"path": "mathx/core.py", "start_line": 1, "end_line": 1}).output.startswith(
        "def clamp"
    )
    assert call(ex, "write_file", {"path": "notes/a.txt", "content": "hi"}).error is None
    assert call(ex, "read_file", {"path": "/workspace/notes/a.txt"}).output == "hi"
    assert call(ex, "str_replace", {"path": "notes/a.txt", "old": "hi", "new": "yo"}).error is None
    assert call(ex, "read_file", {"path": "notes/a.txt"}).output == "yo"
    assert "mathx/" in call(ex, "list_dir", {}).output.split()


def test_bash_and_run_tests(ex):
    r = call(ex, "bash", {"command": "echo hello; exit 3"})
    assert r.exit_code == 3 and "hello" in r.output
    r = call(ex, "run_tests", {})
    assert r.exit_code == 1 and "1 failed" in r.output


def test_submit(ex):
    assert call(ex, "submit", {}).submitted


@pytest.mark.parametrize(
    "name,args,msg",
    [
        ("nope", {}, "unknown tool"),
        ("read_file", "{not json", "not valid JSON"),
        ("read_file", "[1, 2]", "JSON object"),
        ("read_file", {}, "missing required argument 'path'"),
        ("read_file", {"path": 3}, "must be a string"),
        ("read_file", {"path": "missing.txt"}, "No such file"),
        ("str_replace", {"path": "mathx/core.py", "old": "return", "new": "x"}, "occurs 3 times"),
        ("run_tests", {"args": "'unclosed"}, "bad arguments"),
    ],
)
def test_bad_calls_are_error_observations(ex, name, args, msg):
    r = call(ex, name, args)
    assert r.error is not None and msg in r.error


def test_truncation_marks_and_keeps_both_ends():
    text = "a" * 3000 + "MIDDLE" + "z" * 3000
    obs, cut = truncate_observation(text, limit=1000)
    assert cut and "truncated" in obs and obs.startswith("a") and obs.endswith("z") and "MIDDLE" not in obs
    assert truncate_observation("short", 1000) == ("short", False)
