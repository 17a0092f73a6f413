"""Python methods from OpenAI tool schemas, for trainers that read tools off a class (TRL's
``environment_factory``): each method has a real :class:`inspect.Signature`, annotations from the JSON
types and a Google-style docstring, so ``transformers.utils.get_json_schema`` (what TRL renders into the
prompt) gives back the declared schema.

Why a round trip check: TRL never sees the task's schema, only what ``get_json_schema`` reads off the
method. Anything that function cannot carry (a nested object's ``properties``, ``default``, ``minimum``,
a description containing ``Returns:``...) would silently become a different tool in the prompt than the
one the Environment declares and checks. :func:`tool_method` therefore renders the method, reads it
back and raises a one-line :class:`~sparring.errors.TaskError` naming the tool and the key that differs;
such a task runs unchanged in ``rollout_func`` mode, which renders the declared schema as it is.

The only differences allowed are :func:`trl_normalised`'s: whitespace as TRL's docstring parser leaves it,
a parameter without a description gets one made from its name (TRL needs one per parameter),
``required`` in parameter order and left out when empty, and the ``return`` entry (a string) TRL adds.
"""

from __future__ import annotations

import copy
import inspect
import json
import keyword
import re
from collections.abc import Callable
from typing import Any

from sparring.errors import TaskError

_JSON_TO_PY: dict[str, Any] = {
    "string": str, "integer": int, "number": float, "boolean": bool, "null": type(None),
    "array": list, "object": dict,
}  # fmt: skip
_RETURN = {"type": "string"}  # what get_json_schema adds for the `-> str` every tool method has


def _annotation(schema: dict[str, Any]) -> Any:
    """The Python type whose JSON schema (as get_json_schema writes it) is ``schema``'s type, items included."""
    base = _JSON_TO_PY.get(str(schema.get("type")), Any)
    items = schema.get("items")
    if base is list and isinstance(items, dict) and set(items) <= {"type", "items"}:
        return list[_annotation(items)]  # type: ignore[misc]
    extra = schema.get("additionalProperties")
    if base is dict and isinstance(extra, dict) and set(extra) <= {"type", "items"}:
        return dict[str, _annotation(extra)]  # type: ignore[misc]
    return base


def _one_line(text: str) -> str:
    """A description as TRL's ``Args:`` parser leaves it: stripped, line breaks as single spaces."""
    return re.sub(r"\s*\n+\s*", " ", text.strip())


def param_description(name: str, schema: dict[str, Any]) -> str:
    """The parameter's declared description (one line), or one made from its name: TRL needs one each."""
    desc = _one_line(str(schema.get("description") or ""))
    return desc or f"The {name.replace('_', ' ')}."


def trl_normalised(tool: dict[str, Any]) -> dict[str, Any]:
    """What ``get_json_schema`` of :func:`tool_method`'s method equals for the OpenAI ``tool`` schema:
    the declared schema with TRL's normalisations (see the module docstring) and nothing else changed."""
    fn = tool["function"]
    params = fn.get("parameters") or {}
    props = copy.deepcopy(params.get("properties") or {})
    for name, sub in props.items():
        sub["description"] = param_description(name, sub)
    out_params = {k: copy.deepcopy(v) for k, v in params.items() if k not in ("properties", "required")}
    out_params["properties"] = props
    required = [n for n in props if n in set(params.get("required") or [])]
    if required:
        out_params["required"] = required
    out = {"name": fn["name"], "description": inspect.cleandoc(str(fn.get("description") or "")).strip(),
           "parameters": out_params, "return": dict(_RETURN)}  # fmt: skip
    return {"type": "function", "function": out}


def _docstring(description: str, props: dict[str, Any]) -> str:
    lines = [description.strip(), ""]
    if props:
        lines.append("Args:")
        for name, sub in props.items():
            enum = f" (choices: {json.dumps(sub['enum'], ensure_ascii=False)})" if "enum" in sub else ""
            lines.append(f"    {name}: {param_description(name, sub)}{enum}")
    return "\n".join(lines).rstrip() + "\n"


def _first_difference(want: Any, got: Any, path: str) -> str:
    """Where two JSON values first differ, as ``path: declared X, rendered Y``."""
    if isinstance(want, dict) and isinstance(got, dict):
        for k in [*want, *(k for k in got if k not in want)]:
            if want.get(k, "<absent>") != got.get(k, "<absent>"):
                return _first_difference(want.get(k, "<absent>"), got.get(k, "<absent>"), f"{path}.{k}")
    return f"{path}: declared {json.dumps(want)[:120]}, TRL would render {json.dumps(got)[:120]}"


def tool_method(tool: dict[str, Any], call: Callable[[Any, str, dict[str, Any]], str],
                reserved: frozenset[str] = frozenset()) -> Callable[..., str]:  # fmt: skip
    """A method ``(self, <the tool's parameters>) -> str`` for the OpenAI ``tool`` schema: calling it
    runs ``call(self, tool_name, arguments)`` with the arguments given (an optional one left at its
    ``None`` default is not sent). Raises :class:`TaskError` (one line) for a tool name or parameter
    that cannot be a Python name, a name in ``reserved``, or a schema TRL would render differently."""
    fn = tool["function"]
    name = str(fn["name"])
    if not name.isidentifier() or keyword.iskeyword(name) or name.startswith("_"):
        raise TaskError(f"tool {name!r} is not a valid Python method name: rename it in the task's task.toml")
    if name in reserved:
        raise TaskError(f"tool {name!r} collides with the environment class's own {name}(): rename the tool "
                        "in the task's task.toml")  # fmt: skip
    params = fn.get("parameters") or {}
    props: dict[str, Any] = params.get("properties") or {}
    required = set(params.get("required") or [])
    flags = [n in required for n in props]
    # positional when the required parameters come first (Python's rule), else all keyword-only: the
    # signature keeps the declared order, which is the order the prompt shows
    in_order = flags == sorted(flags, reverse=True)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD if in_order else inspect.Parameter.KEYWORD_ONLY
    sig_params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for p, sub in props.items():
        if p == "self" or not p.isidentifier() or keyword.iskeyword(p):
            raise TaskError(f"tool {name!r}: parameter {p!r} is not a valid Python parameter name: rename it in "
                            "the task's task.toml")  # fmt: skip
        annotations[p] = _annotation(sub)
        default = inspect.Parameter.empty if p in required else None
        sig_params.append(inspect.Parameter(p, kind, default=default, annotation=annotations[p]))
    names = list(props)
    drop_none = {p for p in props if p not in required and props[p].get("type") != "null"}
    positional = len(names) if kind is inspect.Parameter.POSITIONAL_OR_KEYWORD else 0

    def method(self: Any, *args: Any, **kwargs: Any) -> str:
        if len(args) > positional:
            raise TypeError(f"{name}() takes {positional} positional argument(s); pass the others by keyword")
        given = dict(zip(names, args, strict=False))
        twice = sorted(set(given) & set(kwargs))
        if twice:
            raise TypeError(f"{name}() got {', '.join(twice)} both by position and by keyword")
        given.update(kwargs)
        return call(self, name, {k: v for k, v in given.items() if not (v is None and k in drop_none)})

    method.__name__ = method.__qualname__ = name
    method.__doc__ = _docstring(str(fn.get("description") or ""), props)
    method.__signature__ = inspect.Signature(sig_params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {**annotations, "return": str}
    _check_round_trip(tool, method)
    return method


def _check_round_trip(tool: dict[str, Any], method: Callable[..., str]) -> None:
    """TaskError unless TRL's reading of ``method`` is the declared schema (modulo :func:`trl_normalised`)."""
    try:
        from transformers.utils import get_json_schema
    except ImportError:  # no TRL here either: nothing renders the method, nothing to check
        return
    want = trl_normalised(tool)
    try:
        got = get_json_schema(method)
    except Exception as e:  # transformers' parse errors: the schema has something a docstring cannot say
        raise TaskError(f"tool {want['function']['name']!r}: TRL cannot read its schema back ({e}); simplify the "
                        "schema in task.toml or use rollout_func mode, which renders it as declared") from None  # fmt: skip
    if got != want:
        where = _first_difference(want, got, want["function"]["name"])
        raise TaskError(f"tool schema differs under TRL's environment_factory: {where}; simplify the schema in "
                        "task.toml or use rollout_func mode, which renders it as declared")  # fmt: skip
