"""The host's half of an ``expr`` site: constants it may evaluate, and the split of an assert into leaves.

An assert the probe cannot reduce to ``observed op constant`` is split (:class:`_Skeleton`): its
*leaves*, the sub-expressions that run the candidate's code, are evaluated in the sandbox; the
*skeleton* over them (``not``/``and``/``or``, comparisons, constants, a few pure built-ins) is
evaluated here on plain data, so what the assert compares with never enters the sandbox. Constant
expressions (:func:`const_value`) are evaluated with only safe, linear built-ins. Used by
:mod:`~sparring.judge.dynamic.probe`, which rewrites the test files, and :mod:`~sparring.judge.withheld`,
which evaluates skeletons over the observed leaves.
"""

from __future__ import annotations

import ast
import builtins
from typing import Any

SAFE_CALLS = ("list", "tuple", "set", "frozenset", "dict", "range", "sorted", "float", "int", "str", "bytes",
              "len", "abs", "min", "max", "sum", "round", "reversed", "bool", "complex")  # fmt: skip
_SAFE_BUILTINS = {n: getattr(builtins, n) for n in SAFE_CALLS}
STR_METHODS = ("lower", "upper", "casefold", "strip", "lstrip", "rstrip", "title")
"""Methods of a constant string a constant expression may call (``TRUTH.lower()``): pure, linear."""
SINGLETONS = (None, True, False, Ellipsis)
HOST_CALLS = (
    "isinstance",
    "type",
    "len",
    "bool",
    "all",
    "any",
    "set",
    "frozenset",
    "sorted",
    "min",
    "max",
    "abs",
)
"""Built-ins an ``expr`` skeleton may call on the host: pure, linear (or n log n) in the size of plain data,
and blind to what plain-data decoding loses (dict order, subclasses): ``list(d)`` or ``sum(xs)`` would not
be, so such calls stay inside a leaf."""
LEAF = "__leaf__"
"""The skeleton's accessor of leaf ``k``: ``__leaf__(k)`` (raises when the leaf raised in the sandbox)."""


class _Scope:
    """Names bound exactly once to a constant expression in one scope, with their values."""

    def __init__(self, consts: dict[str, Any], parent: _Scope | None = None) -> None:
        self.consts = consts
        self.parent = parent

    def lookup(self, name: str) -> tuple[bool, Any]:
        if name in self.consts:
            return True, self.consts[name]
        return self.parent.lookup(name) if self.parent is not None else (False, None)

    def env(self) -> dict[str, Any]:
        out = self.parent.env() if self.parent is not None else {}
        out.update(self.consts)
        return out


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _pure(node: ast.AST, scope: _Scope) -> bool:
    """Only literals, known constant names, operators, containers and the safe builtins' calls."""
    for n in ast.walk(node):
        if isinstance(n, ast.Name):
            if not scope.lookup(n.id)[0] and n.id not in SAFE_CALLS:
                return False
        elif isinstance(n, ast.Call):
            named = isinstance(n.func, ast.Name) and n.func.id in SAFE_CALLS
            method = isinstance(n.func, ast.Attribute) and n.func.attr in STR_METHODS
            if not (named or method) or any(isinstance(a, ast.Starred) for a in n.args):
                return False
        elif isinstance(n, ast.Attribute):
            if n.attr not in STR_METHODS:
                return False
        elif not isinstance(n, (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.BinOp, ast.UnaryOp,
                                ast.BoolOp, ast.Load, ast.operator, ast.unaryop, ast.boolop, ast.keyword,
                                ast.Subscript, ast.Slice, ast.IfExp, ast.Compare, ast.cmpop)):  # fmt: skip
            return False
    return True


def const_value(node: ast.AST, scope: _Scope) -> tuple[bool, Any]:
    """(True, value) when ``node`` is a constant expression the host can evaluate, else (False, None)."""
    if not _pure(node, scope):
        return False, None
    try:
        code = compile(ast.Expression(body=node), "<judge-constant>", "eval")  # type: ignore[arg-type]
        return True, eval(code, {"__builtins__": _SAFE_BUILTINS}, scope.env())  # noqa: S307 - trusted test source
    except Exception:  # noqa: BLE001 - not a constant after all
        return False, None


class _NotLiftable(Exception):
    pass


def _holds_constant(observed: ast.expr, scope: _Scope, rebound: frozenset[str]) -> bool:
    """The observed side of a value site has a constant the host can lift out of it (an expected value
    the result is measured against), so the whole assert is better an ``expr`` site."""
    sk = _Skeleton(scope, rebound)
    try:
        sk.lift(observed)
    except _NotLiftable:
        return False
    return bool(sk.consts) and bool(sk.leaves)


class _Skeleton:
    """Splits an assert's test into leaves (run in the sandbox) and a skeleton over them (run on the host)."""

    def __init__(self, scope: _Scope, rebound: frozenset[str]) -> None:
        self.scope = scope
        self.rebound = rebound
        self.leaves: list[ast.expr] = []
        self.always: list[bool] = []
        """Per leaf: the original evaluates it whatever the values before it (not behind ``and``/``or`` or a
        chained comparison's later operands)."""
        self._behind = 0
        self.consts: dict[str, Any] = {}
        self.const_names: set[str] = set()
        """Names of the test's constants read by the skeleton (they leave the probe with it)."""

    def lift(self, n: ast.expr) -> ast.expr:
        ok, value = const_value(n, self.scope)
        if ok:
            name = f"__c{len(self.consts)}"
            self.consts[name] = value
            self.const_names |= _names(n) - set(SAFE_CALLS)
            return ast.Name(name, ast.Load())
        if isinstance(n, ast.BoolOp):
            return ast.BoolOp(n.op, [self.lift(n.values[0]), *self._lift_behind(n.values[1:])])
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.Not):
            return ast.UnaryOp(ast.Not(), self.lift(n.operand))
        if (
            isinstance(n, ast.BinOp)
            and isinstance(n.op, ast.Add | ast.Sub)
            and (const_value(n.left, self.scope)[0] != const_value(n.right, self.scope)[0])
        ):
            # ``abs(f(x) - TRUTH) <= TOL``: the constant a result is measured against stays on the host. Only
            # + and - with one constant side: linear in the reported value's size (``*``, ``**`` are not).
            return ast.BinOp(self.lift(n.left), n.op, self.lift(n.right))
        if isinstance(n, ast.Compare) and self._identity_ok(n):
            first = [self.lift(n.left), self.lift(n.comparators[0])]
            return ast.Compare(first[0], list(n.ops), [first[1], *self._lift_behind(n.comparators[1:])])
        if self._host_call(n):
            assert isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
            return ast.Call(ast.Name(n.func.id, ast.Load()), [self.lift(a) for a in n.args], [])
        return self._leaf(n)

    def _lift_behind(self, nodes: list[ast.expr]) -> list[ast.expr]:
        """Operands the original may skip (short-circuit): their leaves are not :attr:`always` evaluated."""
        self._behind += 1
        try:
            return [self.lift(v) for v in nodes]
        finally:
            self._behind -= 1

    def strict(self) -> int:
        """How many leading leaves the original always evaluates: an exception of one of those is the
        original assert's own, and the probe raises it (``with pytest.raises(E): assert f(bad) == x``)."""
        n = 0
        while n < len(self.always) and self.always[n]:
            n += 1
        return n

    def _identity_ok(self, n: ast.Compare) -> bool:
        """``is`` compares identities, which decoding does not keep: only against a singleton or a type."""
        sides = [n.left, *n.comparators]
        for i, op in enumerate(n.ops):
            if isinstance(op, ast.Is | ast.IsNot) and not any(
                self._identity_side(s) for s in (sides[i], sides[i + 1])
            ):
                return False
        return True

    def _identity_side(self, s: ast.expr) -> bool:
        ok, value = const_value(s, self.scope)
        if ok:
            return any(value is c for c in SINGLETONS) or isinstance(value, type)
        return (
            self._host_call(s)
            and isinstance(s, ast.Call)
            and isinstance(s.func, ast.Name)
            and s.func.id == "type"
        )

    def _host_call(self, n: ast.expr) -> bool:
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in HOST_CALLS):
            return False
        if n.func.id in self.rebound or n.keywords or any(isinstance(a, ast.Starred) for a in n.args):
            return False
        if n.func.id == "isinstance":
            if len(n.args) != 2:
                return False
            ok, types = const_value(n.args[1], self.scope)
            kinds = types if isinstance(types, tuple) else (types,)
            return ok and all(isinstance(k, type) for k in kinds)
        if n.func.id in ("type", "len", "bool", "all", "any", "abs", "set", "frozenset", "sorted"):
            return len(n.args) == 1
        return len(n.args) >= 1

    def _leaf(self, n: ast.expr) -> ast.expr:
        # Evaluated inside a lambda in the probe: what cannot move into one keeps the whole assert truth-valued.
        # An async comprehension does not compile in a lambda: one such leaf would break the whole probe file.
        if any(
            isinstance(x, ast.Await | ast.Yield | ast.YieldFrom | ast.NamedExpr)
            or (isinstance(x, ast.comprehension) and x.is_async)
            for x in ast.walk(n)
        ):
            raise _NotLiftable
        self.leaves.append(n)
        self.always.append(not self._behind)
        return ast.Call(ast.Name(LEAF, ast.Load()), [ast.Constant(len(self.leaves) - 1)], [])
