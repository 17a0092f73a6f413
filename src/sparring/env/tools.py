"""Agent-facing tools: OpenAI function schemas and their execution in a sandbox.

Each tool returns a :class:`ToolOutcome` holding the *full* output (stored in
the trajectory) and the *observation* the model sees, truncated with an
explicit marker. Bad arguments and unknown tools are observations, never
exceptions: the model is told what was wrong and may try again.

Besides the built-in tools, a task may declare its own
(:class:`~sparring.tasks.spec.CustomTool`): the executor checks the call's
arguments against the declared schema, then runs the task's tool server in the
sandbox with the arguments as JSON on stdin.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sparring.sandbox.base import WORKSPACE, Sandbox
from sparring.tasks.spec import BUILTIN_TOOLS, CustomTool

OBS_LIMIT = 4000  # characters of a tool output shown to the model
OBS_MARKER = "\n[... {n} more characters truncated; the full output is stored ...]"


def _fn(name: str, description: str, properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


TOOL_SCHEMAS: dict[str, dict[str, Any]] = {
    "bash": _fn(
        "bash",
        "Run a shell command in /workspace and return its exit code and output.",
        {"command": {"type": "string"}, "timeout": {"type": "number", "description": "seconds"}},
        ["command"],
    ),
    "read_file": _fn(
        "read_file",
        "Read a file, optionally a range of lines (1-based, inclusive).",
        {"path": {"type": "string"}, "start_line": {"type": "integer"}, "end_line": {"type": "integer"}},
        ["path"],
    ),
    "write_file": _fn(
        "write_file",
        "Create or overwrite a file with the given content.",
        {"path": {"type": "string"}, "content": {"type": "string"}},
        ["path", "content"],
    ),
    "str_replace": _fn(
        "str_replace",
        "Replace the one occurrence of `old` in a file with `new`.",
        {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
        ["path", "old", "new"],
    ),
    "list_dir": _fn("list_dir", "List a directory.", {"path": {"type": "string"}}, []),
    "run_tests": _fn(
        "run_tests",
        "Run the visible tests (pytest) and return the report.",
        {"args": {"type": "string", "description": "extra pytest arguments"}},
        [],
    ),
    "submit": _fn("submit", "Finish: the current workspace is your answer.", {}, []),
}


assert tuple(TOOL_SCHEMAS) == BUILTIN_TOOLS


def tool_schemas(names: list[str], custom: Sequence[CustomTool] = ()) -> list[dict[str, Any]]:
    """The OpenAI schemas of the tools ``names`` (built-in or declared in ``custom``), in order."""
    declared = {t.name: t.function_schema() for t in custom}
    return [TOOL_SCHEMAS.get(n) or declared[n] for n in names if n in TOOL_SCHEMAS or n in declared]


def truncate_observation(text: str, limit: int = OBS_LIMIT) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    head = limit * 3 // 4
    tail = limit - head
    return text[:head] + OBS_MARKER.format(n=len(text) - limit) + text[-tail:], True


@dataclass(frozen=True)
class ToolOutcome:
    output: str
    exit_code: int | None = None
    error: str | None = None
    submitted: bool = False


class ToolError(Exception):
    """A tool call the model got wrong; becomes an error observation."""


def _str_arg(args: dict[str, Any], key: str, required: bool = True) -> str:
    v = args.get(key)
    if v is None:
        if required:
            raise ToolError(f"missing required argument '{key}'")
        return ""
    if not isinstance(v, str):
        raise ToolError(f"argument '{key}' must be a string, got {type(v).__name__}")
    return v


def _abs(path: str) -> str:
    return path if path.startswith("/") else f"{WORKSPACE}/{path}"


class ToolExecutor:
    """Runs tool calls against one sandbox."""

    def __init__(
        self,
        sandbox: Sandbox,
        allowed: list[str],
        exec_timeout: float = 30.0,
        custom: Sequence[CustomTool] = (),
    ) -> None:
        self.sandbox = sandbox
        self.allowed = set(allowed)
        self.exec_timeout = exec_timeout
        self.custom = {t.name: t for t in custom}

    async def run(self, name: str, raw_args: str | dict[str, Any] | None) -> ToolOutcome:
        if name not in self.allowed or (name not in TOOL_SCHEMAS and name not in self.custom):
            return ToolOutcome(
                "", error=f"unknown tool '{name}'; available: {', '.join(sorted(self.allowed))}"
            )
        try:
            args = self._parse(raw_args)
            if name not in TOOL_SCHEMAS:
                return await self._custom(self.custom[name], args)
            return await getattr(self, f"_t_{name}")(args)
        except ToolError as e:
            return ToolOutcome("", error=str(e))
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as e:
            return ToolOutcome("", error=f"{e.strerror or type(e).__name__}: {getattr(e, 'filename', '')}")
        except OSError as e:
            return ToolOutcome("", error=f"{e.strerror or e}")
        except (ValueError, TypeError) as e:
            return ToolOutcome("", error=f"bad arguments: {e}")

    @staticmethod
    def _parse(raw: str | dict[str, Any] | None) -> dict[str, Any]:
        if raw is None or raw == "":
            return {}
        if isinstance(raw, dict):
            return raw
        try:
            v = json.loads(raw)
        except json.JSONDecodeError as e:
            raise ToolError(f"arguments are not valid JSON: {e.msg} at position {e.pos}") from None
        if not isinstance(v, dict):
            raise ToolError("arguments must be a JSON object")
        return v

    async def _custom(self, tool: CustomTool, a: dict[str, Any]) -> ToolOutcome:
        check_arguments(tool, a)
        cmd = f"{tool.command} {shlex.quote(tool.name)}"
        r = await self.sandbox.exec(cmd, timeout=self.exec_timeout, stdin=json.dumps(a).encode())
        text = r.stdout + (("\n[stderr]\n" + r.stderr) if r.stderr else "")
        if r.timed_out:
            text += f"\n[timed out after {self.exec_timeout:g}s]"
        return ToolOutcome(f"[exit {r.exit_code}]\n{text}", exit_code=r.exit_code)

    async def _t_bash(self, a: dict[str, Any]) -> ToolOutcome:
        cmd = _str_arg(a, "command")
        t = a.get("timeout", self.exec_timeout)
        timeout = min(float(t), self.exec_timeout * 4) if isinstance(t, int | float) else self.exec_timeout
        r = await self.sandbox.exec(cmd, timeout=timeout)
        text = r.stdout + (("\n[stderr]\n" + r.stderr) if r.stderr else "")
        if r.timed_out:
            text += f"\n[timed out after {timeout:g}s]"
        if r.oom_killed:
            text += "\n[killed: out of memory]"
        return ToolOutcome(f"[exit {r.exit_code}]\n{text}", exit_code=r.exit_code)

    async def _t_read_file(self, a: dict[str, Any]) -> ToolOutcome:
        path = _str_arg(a, "path")
        text = (await self.sandbox.read_file(_abs(path))).decode("utf-8", errors="replace")
        s, e = a.get("start_line"), a.get("end_line")
        if s is not None or e is not None:
            lines = text.splitlines(keepends=True)
            lo = max(1, int(s or 1))
            hi = min(len(lines), int(e or len(lines)))
            text = "".join(lines[lo - 1 : hi])
        return ToolOutcome(text)

    async def _t_write_file(self, a: dict[str, Any]) -> ToolOutcome:
        path, content = _str_arg(a, "path"), _str_arg(a, "content")
        await self.sandbox.write_file(_abs(path), content.encode())
        return ToolOutcome(f"wrote {len(content.encode())} bytes to {path}")

    async def _t_str_replace(self, a: dict[str, Any]) -> ToolOutcome:
        path, old, new = _str_arg(a, "path"), _str_arg(a, "old"), _str_arg(a, "new", required=False)
        if not old:
            raise ToolError("'old' must not be empty")
        text = (await self.sandbox.read_file(_abs(path))).decode("utf-8", errors="replace")
        n = text.count(old)
        if n != 1:
            raise ToolError(f"'old' occurs {n} times in {path}; it must occur exactly once")
        await self.sandbox.write_file(_abs(path), text.replace(old, new, 1).encode())
        return ToolOutcome(f"replaced 1 occurrence in {path}")

    async def _t_list_dir(self, a: dict[str, Any]) -> ToolOutcome:
        path = _str_arg(a, "path", required=False) or WORKSPACE
        return ToolOutcome("\n".join(await self.sandbox.list_dir(_abs(path))))

    async def _t_run_tests(self, a: dict[str, Any]) -> ToolOutcome:
        extra = _str_arg(a, "args", required=False)
        cmd = "python -m pytest -q -p no:cacheprovider tests " + " ".join(
            shlex.quote(x) for x in shlex.split(extra)
        )
        r = await self.sandbox.exec(cmd, timeout=self.exec_timeout * 2)
        return ToolOutcome(f"[exit {r.exit_code}]\n{r.stdout}{r.stderr}", exit_code=r.exit_code)

    async def _t_submit(self, a: dict[str, Any]) -> ToolOutcome:
        return ToolOutcome("submitted", submitted=True)


_PY_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list,), "object": (dict,), "null": (type(None),),
}  # fmt: skip


def check_arguments(tool: CustomTool, args: dict[str, Any]) -> None:
    """ToolError unless ``args`` has every required parameter, no undeclared one, each of its type."""
    props: dict[str, Any] = tool.parameters.get("properties", {})
    missing = [k for k in tool.parameters.get("required", []) if k not in args]
    if missing:
        raise ToolError(f"missing required argument(s) {', '.join(map(repr, missing))} of {tool.name}")
    extra = sorted(set(args) - set(props))
    if extra:
        raise ToolError(
            f"unknown argument(s) {', '.join(map(repr, extra))} of {tool.name}; it takes {sorted(props)}"
        )
    for k, v in args.items():
        want = props[k]["type"]
        ok = isinstance(v, _PY_TYPES[want]) and not (want in ("integer", "number") and isinstance(v, bool))
        if not ok:
            raise ToolError(f"argument {k!r} of {tool.name} must be {want}, got {type(v).__name__}")
