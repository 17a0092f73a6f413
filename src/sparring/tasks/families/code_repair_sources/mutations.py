"""AST bug injection for the code-repair family.

Every candidate mutation changes exactly one node of one module: an operator
(``+``/``-``, ``*``, ``//``), a comparison (``<`` to ``<=``, ``==`` to ``!=``), an
integer constant or ``range`` bound (off by one), a boolean operator, a
default argument value, the order of two call arguments, or an edge-case guard
(an ``if`` whose body returns or raises, removed). Candidates are enumerated in
``ast.walk`` order, so the same source always yields the same list, and are
applied to a fresh parse of the source, so nothing is shared between uses.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TypeGuard

from sparring import pyast

FAMILY = "code-repair"

#: Difficulty tier of each mutation kind.
DIFFICULTY: dict[str, int] = {
    "operator-swap": 1,
    "comparison-flip": 1,
    "boolean-swap": 1,
    "off-by-one": 2,
    "wrong-default": 2,
    "swapped-args": 2,
    "removed-edge-case": 3,
}

_BIN_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Add,
    ast.FloorDiv: ast.Div,
    ast.Div: ast.FloorDiv,
    ast.Mod: ast.FloorDiv,
}
_CMP_FLIPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_NO_SWAP_CALLS = frozenset({"isinstance", "issubclass", "getattr", "setattr", "hasattr", "super"})
_GUARD_ENDS = (ast.Return, ast.Raise, ast.Continue)
_SEQUENCE_NODES = (ast.JoinedStr, ast.List, ast.Tuple, ast.ListComp)


@dataclass(frozen=True)
class Mutation:
    """One candidate bug: a change of kind/variant to node ``index`` (ast.walk order) of ``path``."""

    base: str
    path: str
    index: int
    kind: str
    variant: str
    lineno: int
    col: int

    @property
    def location(self) -> str:
        """The mutated node; two tasks of one set never share a location."""
        return f"{self.path}:{self.lineno}:{self.col}#{self.index}"

    @property
    def site(self) -> str:
        return f"{self.location}/{self.variant}"

    @property
    def task_id(self) -> str:
        digest = hashlib.sha256(f"{self.base}|{self.site}|{self.kind}".encode()).hexdigest()[:8]
        return f"{FAMILY}-{self.base}-{digest}"


@dataclass(frozen=True)
class _Context:
    """Facts about a module's nodes that decide which mutations make sense."""

    defaults: frozenset[int]
    aug_values: frozenset[int]
    guards: frozenset[int]

    @classmethod
    def of(cls, tree: ast.Module) -> _Context:
        defaults: set[int] = set()
        aug_values: set[int] = set()
        guards: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                defaults.update(id(d) for d in [*node.args.defaults, *node.args.kw_defaults] if d is not None)
            elif isinstance(node, ast.AugAssign):
                aug_values.add(id(node.value))
            for _, value in ast.iter_fields(node):
                if isinstance(value, list) and len(value) >= 2:
                    guards.update(id(s) for s in value if _is_guard(s))
        return cls(frozenset(defaults), frozenset(aug_values), frozenset(guards))


def _is_guard(node: ast.AST) -> bool:
    """An ``if`` without ``else`` whose body ends by leaving: an edge-case branch."""
    return isinstance(node, ast.If) and not node.orelse and isinstance(node.body[-1], _GUARD_ENDS)


def _is_int(node: ast.AST) -> TypeGuard[ast.Constant]:
    return isinstance(node, ast.Constant) and type(node.value) is int


def _sequence_like(node: ast.AST) -> bool:
    """Whether an operand is (built from) a string or sequence display, where +/* mean concatenation."""
    if isinstance(node, _SEQUENCE_NODES) or (isinstance(node, ast.Constant) and isinstance(node.value, str)):
        return True
    return isinstance(node, ast.BinOp) and (_sequence_like(node.left) or _sequence_like(node.right))


def _range_stop(node: ast.Call) -> int | None:
    """Index of the stop argument of a ``range(...)`` call with a computed stop."""
    if not (isinstance(node.func, ast.Name) and node.func.id == "range") or not 1 <= len(node.args) <= 3:
        return None
    i = 0 if len(node.args) == 1 else 1
    return None if isinstance(node.args[i], ast.Constant) else i


def _swappable(node: ast.Call) -> bool:
    if len(node.args) < 2 or any(isinstance(a, ast.Starred) for a in node.args[:2]):
        return False
    if isinstance(node.func, ast.Name) and node.func.id in _NO_SWAP_CALLS:
        return False
    return ast.dump(node.args[0]) != ast.dump(node.args[1])


def _default_variants(value: object) -> Iterator[tuple[str, str]]:
    if isinstance(value, bool):
        yield "wrong-default", f"{value}->{not value}"
    elif isinstance(value, int):
        yield "wrong-default", "+1"
        if value != 0:
            yield "wrong-default", "-1"
    elif isinstance(value, float):
        yield "wrong-default", "+1"


def _node_mutations(node: ast.AST, ctx: _Context) -> Iterator[tuple[str, str]]:
    """(kind, variant) of every mutation that applies to this node."""
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAPS:
        if not (_sequence_like(node.left) or _sequence_like(node.right)):
            yield "operator-swap", f"{type(node.op).__name__}->{_BIN_SWAPS[type(node.op)].__name__}"
    elif isinstance(node, ast.AugAssign) and type(node.op) in _BIN_SWAPS and not _sequence_like(node.value):
        yield "operator-swap", f"{type(node.op).__name__}->{_BIN_SWAPS[type(node.op)].__name__}"
    elif isinstance(node, ast.Compare):
        for k, op in enumerate(node.ops):
            if type(op) in _CMP_FLIPS:
                yield "comparison-flip", f"{k}:{type(op).__name__}->{_CMP_FLIPS[type(op)].__name__}"
    elif isinstance(node, ast.BoolOp):
        yield "boolean-swap", "And->Or" if isinstance(node.op, ast.And) else "Or->And"
    elif isinstance(node, ast.Constant) and id(node) in ctx.defaults:
        yield from _default_variants(node.value)
    elif _is_int(node):
        yield "off-by-one", "+1"
        if not (id(node) in ctx.aug_values and node.value == 1):  # `i += 0` would just hang
            yield "off-by-one", "-1"
    elif isinstance(node, ast.Call):
        if _range_stop(node) is not None:
            yield "off-by-one", "stop+1"
            yield "off-by-one", "stop-1"
        if _swappable(node):
            yield "swapped-args", "0<->1"
    elif id(node) in ctx.guards:
        yield "removed-edge-case", "drop"


def enumerate_mutations(base: str, path: str, source: str) -> list[Mutation]:
    """Every candidate mutation of one module, in a deterministic order."""
    tree = pyast.parse(source)
    ctx = _Context.of(tree)
    return [
        Mutation(base, path, index, kind, variant, getattr(node, "lineno", 0), getattr(node, "col_offset", 0))
        for index, node in enumerate(ast.walk(tree))
        for kind, variant in _node_mutations(node, ctx)
    ]


def _bump(value: object, variant: str) -> int | float:
    if isinstance(value, bool):
        return not value
    if not isinstance(value, (int, float)):
        raise ValueError(f"cannot bump constant {value!r}")
    return value + 1 if variant.endswith("+1") else value - 1


def _remove_stmt(tree: ast.Module, target: ast.AST) -> None:
    for node in ast.walk(tree):
        for _, value in ast.iter_fields(node):
            if isinstance(value, list) and any(s is target for s in value):
                value[:] = [s for s in value if s is not target]
                return
    raise ValueError("statement to remove not found")


def _mutate_node(tree: ast.Module, node: ast.AST, kind: str, variant: str) -> None:
    if kind == "operator-swap" and isinstance(node, (ast.BinOp, ast.AugAssign)):
        node.op = _BIN_SWAPS[type(node.op)]()
    elif kind == "comparison-flip" and isinstance(node, ast.Compare):
        k = int(variant.split(":", 1)[0])
        node.ops[k] = _CMP_FLIPS[type(node.ops[k])]()
    elif kind == "boolean-swap" and isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif kind in ("wrong-default", "off-by-one") and isinstance(node, ast.Constant):
        node.value = _bump(node.value, variant)
    elif kind == "off-by-one" and isinstance(node, ast.Call) and (i := _range_stop(node)) is not None:
        op = ast.Add() if variant == "stop+1" else ast.Sub()
        node.args[i] = ast.BinOp(left=node.args[i], op=op, right=ast.Constant(1))
    elif kind == "swapped-args" and isinstance(node, ast.Call):
        node.args[0], node.args[1] = node.args[1], node.args[0]
    elif kind == "removed-edge-case":
        _remove_stmt(tree, node)
    else:
        raise ValueError(f"mutation {kind}/{variant} does not apply to {type(node).__name__}")


def apply_mutation(source: str, mutation: Mutation) -> str:
    """The module's source (ast.unparse form) with the mutation applied."""
    tree = pyast.parse(source)
    node = list(ast.walk(tree))[mutation.index]
    _mutate_node(tree, node, mutation.kind, mutation.variant)
    return ast.unparse(ast.fix_missing_locations(tree))


def normalise(source: str) -> str:
    """The canonical (ast.unparse) form every package file is written in."""
    return ast.unparse(pyast.parse(source)) + "\n"
