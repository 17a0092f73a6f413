"""TRL ``environment_factory`` exposes exactly the tools the Environment offers, custom ones included:
each generated method reads back through ``transformers.utils.get_json_schema`` (what TRL renders) as the
declared schema, for the tool-use family's store service and for random valid schemas; a call runs the
task's tool server in the sandbox and changes its SQLite state; names that cannot be methods, and
schemas TRL cannot carry, are one-line errors; tasks with different tool sets get one class each.
(The real ``GRPOTrainer`` run is in test_trl.py, next to the trainer fixtures it shares.)"""

from __future__ import annotations

import inspect
import keyword
import shutil
import sqlite3
import string
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.utils import get_json_schema

from integration_support import make_scribble_task
from sparring.env import Environment
from sparring.errors import TaskError
from sparring.integrations import trl as strl
from sparring.integrations.tool_methods import tool_method, trl_normalised
from sparring.integrations.trl_environment import RESERVED, SparringToolEnv
from sparring.tasks.loader import find_tasks, write_task
from sparring.tasks.spec import BUILTIN_TOOLS, CustomTool, JudgeSpec, TaskSpec


def public_methods(cls: type) -> set[str]:
    """The methods TRL takes as tools: public functions of the class but reset and get_reward."""
    return {n for n, _ in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")} - {
        "reset", "get_reward"
    }  # fmt: skip


def assert_declared(schema: dict[str, Any], rendered: dict[str, Any]) -> None:
    """What the model must see, checked field by field against the declaration (not via trl_normalised)."""
    fn, got = schema["function"], rendered["function"]
    assert got["name"] == fn["name"] and got["description"] == fn["description"].strip()
    props, got_props = fn["parameters"].get("properties", {}), got["parameters"]["properties"]
    assert list(got_props) == list(props)
    assert set(got["parameters"].get("required", [])) == set(fn["parameters"].get("required", []))
    for k, sub in props.items():
        assert got_props[k]["type"] == sub["type"]
        assert got_props[k].get("enum") == sub.get("enum")
        assert got_props[k].get("items") == sub.get("items")
        if sub.get("description", "").strip():
            assert got_props[k]["description"] == " ".join(sub["description"].split())


def test_tool_use_methods_read_back_as_declared(tool_use_tasks):
    env_cls = strl.environment_factory(tool_use_tasks)
    assert isinstance(env_cls, type) and issubclass(env_cls, SparringToolEnv)  # one tool set: one class
    offered = Environment(find_tasks(tool_use_tasks)[0]).tools
    assert public_methods(env_cls) == {s["function"]["name"] for s in offered}  # exactly those: no bash
    assert any(s["function"]["name"] not in BUILTIN_TOOLS for s in offered)
    instance = env_cls()
    for schema in offered:
        method = getattr(instance, schema["function"]["name"])
        rendered = get_json_schema(method)
        assert rendered == trl_normalised(schema)
        assert_declared(schema, rendered)
    sig = inspect.signature(instance.place_order)
    assert [(p.name, p.annotation) for p in sig.parameters.values()] == [
        ("customer_id", str), ("sku", str), ("qty", int)
    ] and sig.return_annotation is str  # fmt: skip
    assert inspect.signature(instance.report).parameters["facts"].annotation is dict


def test_builtin_tools_read_back_as_declared(repair_tasks):
    env_cls = strl.environment_factory(repair_tasks)
    assert isinstance(env_cls, type)
    assert public_methods(env_cls) == set(BUILTIN_TOOLS)
    for schema in Environment(find_tasks(repair_tasks)[0]).tools:
        rendered = get_json_schema(getattr(env_cls(), schema["function"]["name"]))
        assert rendered == trl_normalised(schema)
        assert_declared(schema, rendered)
    read = inspect.signature(env_cls.read_file).parameters
    assert read["start_line"].default is None and read["path"].default is inspect.Parameter.empty


# -- random valid schemas ----------------------------------------------------------------------------

_WORDS = string.ascii_letters + string.digits + " .,;'-"
_text = st.text(_WORDS + "\n", min_size=0, max_size=30)
_name = st.from_regex(r"[a-z][a-z0-9_]{0,10}", fullmatch=True).filter(
    lambda n: not keyword.iskeyword(n) and n != "self"
)
_BASIC = ("string", "integer", "number", "boolean")
_ENUM = {
    "string": st.text(string.ascii_letters + string.digits + "-_", min_size=1, max_size=8),
    "integer": st.integers(-1000, 1000),
    "number": st.floats(-1e6, 1e6, allow_nan=False).map(lambda f: f if f != int(f) else f + 0.5),
    "boolean": st.booleans(),
}


@st.composite
def _param(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from([*_BASIC, "array", "object"]))
    out: dict[str, Any] = {"type": kind}
    if kind in _BASIC and kind != "boolean" and draw(st.booleans()):
        out["enum"] = draw(st.lists(_ENUM[kind], min_size=1, max_size=4, unique=True))
    if kind == "array" and draw(st.booleans()):
        out["items"] = {"type": draw(st.sampled_from(_BASIC))}
    desc = draw(_text)
    if desc:
        out["description"] = desc
    return out


@st.composite
def custom_tools(draw: Any) -> CustomTool:
    props = draw(st.dictionaries(_name, _param(), max_size=5))
    required = [k for k in props if draw(st.booleans())]
    desc = draw(st.text(_WORDS + "\n", min_size=1, max_size=60).filter(lambda s: s.strip()))
    name = draw(_name.filter(lambda n: n not in RESERVED and n not in BUILTIN_TOOLS))
    params = {"type": "object", "properties": props, **({"required": required} if required else {})}
    return CustomTool(name=name, description=desc, parameters=params, command="python server.py")


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tool=custom_tools(), data=st.data())
def test_random_schemas_read_back_as_declared(tool, data):
    schema = tool.function_schema()
    calls: list[tuple[str, dict[str, Any]]] = []
    method = tool_method(schema, lambda self, name, args: calls.append((name, args)) or "ok", RESERVED)
    cls = type("Probe", (), {tool.name: method})
    rendered = get_json_schema(getattr(cls(), tool.name))
    assert rendered == trl_normalised(schema)
    assert_declared(schema, rendered)
    # a call hands the Environment exactly the arguments given (an optional one left at None: not sent)
    props, required = tool.parameters["properties"], set(tool.parameters.get("required", []))
    args = {k: data.draw(st.sampled_from(sub["enum"])) if "enum" in sub else f"v{k}" for k, sub in props.items()
            if k in required or data.draw(st.booleans())}  # fmt: skip
    assert getattr(cls(), tool.name)(**args) == "ok" and calls[-1] == (tool.name, args)


# -- names that cannot be methods, schemas TRL cannot carry -----------------------------------------


def _tool(name: str, props: dict[str, Any], description: str = "Does a thing.") -> dict[str, Any]:
    return CustomTool(name=name, description=description, command="python s.py",
                      parameters={"type": "object", "properties": props}).function_schema()  # fmt: skip


@pytest.mark.parametrize(
    ("schema", "needle"),
    [
        (_tool("reset", {}), "'reset' collides"),
        (_tool("get_reward", {}), "'get_reward' collides"),
        (_tool("tasks", {}), "'tasks' collides"),
        (_tool("class", {}), "'class' is not a valid Python method name"),
        (_tool("lookup", {"from": {"type": "string"}}), "parameter 'from' is not a valid"),
        (_tool("lookup", {"self": {"type": "string"}}), "parameter 'self' is not a valid"),
        (_tool("lookup", {"my-key": {"type": "string"}}), "parameter 'my-key' is not a valid"),
        (_tool("lookup", {"q": {"type": "object", "properties": {"a": {"type": "string"}}}}),
         "lookup.function.parameters.properties.q.properties"),
        (_tool("lookup", {"q": {"type": "string", "default": "x"}}), "properties.q.default"),
        (_tool("lookup", {}, description="Find it. Returns: the id"), "lookup.function.description"),
    ],
)  # fmt: skip
def test_a_bad_name_or_an_unrenderable_schema_is_a_one_line_error(schema, needle):
    with pytest.raises(TaskError) as e:
        tool_method(schema, lambda *a: "", RESERVED)
    assert needle in str(e.value) and "\n" not in str(e.value), str(e.value)


def test_a_task_declaring_a_colliding_tool_is_named(tmp_path):
    tool = CustomTool(name="get_reward", description="Pays out.", command="python s.py")
    spec = TaskSpec(id="greedy", family="custom", instruction="Call get_reward.", success_criteria="None.",
                    tools=["get_reward", "submit"], custom_tools=[tool],
                    judge=JudgeSpec(hidden_tests=["test_h.py::test_x"]))  # fmt: skip
    write_task(tmp_path / "greedy", spec, workspace={"s.py": "print(1)\n"},
               hidden={"test_h.py": "def test_x():\n    pass\n"}, solution={"s.py": "print(2)\n"})  # fmt: skip
    with pytest.raises(TaskError, match=r"^task greedy: tool 'get_reward' collides"):
        strl.environment_factory(tmp_path)


# -- one class per tool set ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def mixed_tasks(tmp_path_factory, tool_use_tasks) -> Path:
    """Two tool-use tasks (the store service's tools) and one scribble task (the built-in tools)."""
    out = tmp_path_factory.mktemp("mixed")
    make_scribble_task(out / "scribble")
    for t in find_tasks(tool_use_tasks):
        shutil.copytree(t.path, out / t.id)
    return out


def test_tasks_with_different_tool_sets_get_one_class_each(mixed_tasks):
    envs = strl.environment_factory(mixed_tasks)
    assert isinstance(envs, dict) and len(envs) == 2
    rows = strl.tasks_to_dataset(mixed_tasks)
    by_task = {r["task_id"]: r["environment"] for r in rows}
    assert len(set(by_task.values())) == 2 and by_task.keys() == {t.id for t in find_tasks(mixed_tasks)}
    for name, cls in envs.items():
        task_ids = {t for t, e in by_task.items() if e == name}
        assert cls.task_ids == task_ids
        tools = Environment(strl.TaskSet(mixed_tasks).task(sorted(task_ids)[0])).tools
        assert public_methods(cls) == {s["function"]["name"] for s in tools}  # each prompt: its own tools
    scribble_cls = envs[by_task["scribble"]]
    assert "bash" in public_methods(scribble_cls) and "place_order" not in public_methods(scribble_cls)
    foreign = next(t for t in by_task if t != "scribble")
    with pytest.raises(TaskError, match=f"^task '{foreign}' offers other tools than this environment"):
        scribble_cls().reset(task_id=foreign)


# -- a generated method runs the task's tool server in the sandbox ------------------------------------


def _state(instance: SparringToolEnv, tmp_path: Path, name: str) -> sqlite3.Connection:
    """The service's SQLite state as the sandbox holds it now (a copy)."""
    env = instance.environment
    assert env is not None and env.sandbox is not None
    data = instance._run(env.sandbox.read_file("/workspace/.service/state.db"))
    (tmp_path / name).write_bytes(data)
    return sqlite3.connect(tmp_path / name)


def test_generated_methods_drive_the_service_to_the_judges_reward(tool_use_tasks, tmp_path):
    env_cls = strl.environment_factory(tool_use_tasks)
    assert isinstance(env_cls, type)
    task = find_tasks(tool_use_tasks)[0]
    calls = task.solution_calls()
    assert {n for n, _ in calls} - set(BUILTIN_TOOLS)  # the reference is custom-tool calls
    instance = env_cls()
    instance.reset(task_id=task.id, seed=0)
    before = _state(instance, tmp_path, "before.db")
    observations = [getattr(instance, name)(**args) for name, args in calls]
    after = _state(instance, tmp_path, "after.db")
    env = instance.environment
    assert env is not None
    # each call ran the task's tool server (its exit and output are the observation, as in every mode)
    assert all(o.startswith("[exit 0]") for o in observations), observations
    assert [m["content"] for m in env.messages if m["role"] == "tool"] == observations
    assert [(s.name, s.arguments) for s in env.steps] == calls
    assert instance.tool_steps == env.steps and all(s.exit_code == 0 for s in env.steps)
    changed = [
        t for (t,) in before.execute("SELECT name FROM sqlite_master WHERE type='table'")
        if sorted(before.execute(f"SELECT * FROM {t}")) != sorted(after.execute(f"SELECT * FROM {t}"))
    ]  # fmt: skip
    assert "orders" in changed or "customers" in changed, changed  # the service's state really moved
    assert after.execute("SELECT count(*) FROM reports").fetchone()[0] > 0
    assert instance.submit() == "submitted"
    assert instance.get_reward() == 1.0 and env.status == "ok"
    # control: the same task, only looking around, is judged 0 (the reward is the state's, not the calls')
    instance.reset(task_id=task.id, seed=1)
    name, args = calls[0]
    assert getattr(instance, name)(**args).startswith("[exit 0]")
    assert instance.get_reward() == 0.0
    # a wrong argument is the Environment's observation, not an exception: the model may try again
    instance.reset(task_id=task.id, seed=2)
    assert "must be integer" in instance.place_order(customer_id="C-1", sku="S", qty="three")
    assert "missing required argument" in instance.place_order(customer_id="C-1")
    instance.get_reward()
