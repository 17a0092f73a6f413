"""What a name in a module can refer to: aliases resolved through imports and assignments.

The static hack checks compare canonical dotted names (``os._exit``), so each
expression is first resolved through a per-module symbol table:

* ``import os as o`` binds ``o`` to ``os``; ``from os import _exit as e`` binds
  ``e`` to ``os._exit``; ``from os import *`` makes every unbound name ``n``
  also ``os.n``;
* ``y = x`` (also ``a, b = x, y``, ``y: T = x``, ``(y := x)``) binds ``y`` to
  whatever ``x`` can be, to a fixed point;
* ``getattr(m, "n")``, ``m.__dict__["n"]``, ``vars(m)["n"]``,
  ``sys.modules["m"]``, ``__import__("m")`` and ``importlib.import_module("m")``
  with constant strings resolve like the plain spelling;
* module aliases of the same object are canonical (``posix._exit`` is
  ``os._exit``, ``builtins.exit`` is ``exit``).

The table is flow- and scope-insensitive on purpose: a name gets *every*
meaning any binding in the module gives it, so a check that asks "can this be
``os._exit``?" fails closed. Names bound only to something unknown (a local
variable, a parameter, a ``def``) resolve to nothing. Dynamic lookups whose
target cannot be read from the source (a non-constant name) are reported by
:func:`dynamic_lookups` instead.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

UNKNOWN = ""
"""The meaning of a name bound to something that is not a module or a module attribute."""
CANONICAL = (("posix.", "os."), ("nt.", "os."), ("_signal.", "signal."), ("os.sys.", "sys."),
             ("builtins.", ""), ("__builtins__.", ""), ("_io.", "io."))  # fmt: skip
IMPORTERS = frozenset({"importlib.import_module", "__import__", "importlib.__import__"})
LOOKUPS = frozenset({"getattr", "setattr", "delattr", "hasattr"})
MAX_ROUNDS = 20


def canonical(name: str) -> str:
    """One spelling per object: ``posix._exit`` -> ``os._exit``, ``builtins.exit`` -> ``exit``."""
    changed = True
    while changed:
        changed = False
        for prefix, repl in CANONICAL:
            if name.startswith(prefix):
                name = repl + name[len(prefix) :]
                changed = True
        if name.endswith(".__call__"):
            name, changed = name[: -len(".__call__")], True
    return name


class SymbolTable:
    """Names of one module mapped to every canonical dotted name they can stand for."""

    def __init__(self, tree: ast.AST) -> None:
        self.names: dict[str, set[str]] = {}
        self.star: set[str] = set()
        self.returns: dict[str, set[str]] = {}
        """What calling a function of the module can return (the meanings of its ``return`` values)."""
        self.modules: set[str] = set()
        """Canonical names that came from an import statement (modules, or names taken from one)."""
        self._build(tree)

    # ------------------------------------------------------------------ building

    def _bind(self, name: str, meanings: set[str]) -> bool:
        cur = self.names.setdefault(name, set())
        new = (meanings or {UNKNOWN}) - cur
        cur.update(new)
        return bool(new)

    def _build(self, tree: ast.AST) -> None:
        assigns: list[tuple[ast.expr, ast.expr]] = []
        functions: list[tuple[str, list[ast.expr]]] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    if a.asname:
                        self._bind(a.asname, {canonical(a.name)})
                    else:
                        top = a.name.split(".")[0]
                        self._bind(top, {canonical(top)})
                    self.modules.add(canonical(a.name))
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                for a in node.names:
                    if a.name == "*":
                        self.star.add(canonical(mod))
                        continue
                    full = canonical(f"{mod}.{a.name}" if mod else a.name)
                    self._bind(a.asname or a.name, {full})
                    self.modules.add(full)
            elif isinstance(node, ast.Assign):
                assigns.extend((t, node.value) for t in node.targets)
            elif isinstance(node, ast.AnnAssign | ast.AugAssign | ast.NamedExpr) and node.value is not None:
                assigns.append((node.target, node.value))
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                self._bind(node.name, set())
                if not isinstance(node, ast.ClassDef):
                    rets = [r.value for r in _own_returns(node) if r.value is not None]
                    functions.append((node.name, rets))
            elif isinstance(node, ast.arg):
                self._bind(node.arg, set())
            elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
                for t in _names(node.target):
                    self._bind(t, set())
            elif isinstance(node, ast.withitem) and node.optional_vars is not None:
                for t in _names(node.optional_vars):
                    self._bind(t, self.resolve(node.context_expr) if isinstance(node.optional_vars, ast.Name)
                               else set())  # fmt: skip
            elif isinstance(node, ast.ExceptHandler) and node.name:
                self._bind(node.name, set())
        for _ in range(MAX_ROUNDS):
            changed = False
            for target, value in assigns:
                for name, expr in _pairs(target, value):
                    changed |= self._bind(name, self.resolve(expr) if expr is not None else set())
                    if isinstance(expr, ast.Lambda):
                        changed |= self._returned(name, self.resolve(expr.body))
            for name, rets in functions:
                for r in rets:
                    changed |= self._returned(name, self.resolve(r))
            if not changed:
                break

    def _returned(self, name: str, meanings: set[str]) -> bool:
        cur = self.returns.setdefault(name, set())
        new = {m for m in meanings if m} - cur
        cur.update(new)
        return bool(new)

    # ------------------------------------------------------------------ resolving

    def resolve(self, node: ast.AST) -> set[str]:
        """Every canonical dotted name ``node`` can evaluate to (empty: none the table knows)."""
        if isinstance(node, ast.Name):
            bound = self.names.get(node.id)
            if bound is None:
                return {canonical(node.id)} | {canonical(f"{m}.{node.id}") for m in self.star}
            return {m for m in bound if m}
        if isinstance(node, ast.Attribute):
            return {canonical(f"{b}.{node.attr}") for b in self.resolve(node.value)}
        if isinstance(node, ast.Call):
            return self._resolve_call(node)
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            return {m for e in node.elts for m in self.resolve(e)}
        if isinstance(node, ast.Dict):
            return {m for v in node.values for m in self.resolve(v)}
        if isinstance(node, ast.Starred):
            return self.resolve(node.value)
        if isinstance(node, ast.Subscript):
            key = _const_str(node.slice)
            out: set[str] = set()
            if isinstance(node.value, ast.Name | ast.List | ast.Tuple | ast.Dict | ast.Subscript):
                out.update(self.resolve(node.value))  # an element of a container of modules is one of them
            if key is None:
                return out
            for b in self.resolve(node.value):
                if b in ("sys.modules", "__dict__", "builtins", "__builtins__"):
                    out.add(canonical(key))
                elif b.endswith(".__dict__"):
                    out.add(canonical(f"{b[: -len('.__dict__')]}.{key}"))
            if isinstance(node.value, ast.Call) and self._called(node.value) & {"vars", "globals", "locals"}:
                inner = node.value.args
                bases = self.resolve(inner[0]) if inner else {""}
                out.update(canonical(f"{b}.{key}" if b else key) for b in bases)
            return out
        return set()

    def _called(self, call: ast.Call) -> set[str]:
        return self.resolve(call.func)

    def _resolve_call(self, call: ast.Call) -> set[str]:
        funcs = self._called(call)
        first = _const_str(call.args[0]) if call.args else None
        out: set[str] = set()
        if isinstance(call.func, ast.Name):
            out.update(self.returns.get(call.func.id, set()))
        if funcs & IMPORTERS and first is not None:
            out.add(canonical(first if "importlib.import_module" in funcs else first.split(".")[0]))
        if "getattr" in funcs and len(call.args) >= 2:
            name = _const_str(call.args[1])
            if name is not None:
                out.update(canonical(f"{b}.{name}") for b in self.resolve(call.args[0]))
        return out

    def refers_to_module(self, node: ast.AST) -> bool:
        """Whether ``node`` can be something an import statement brought in (a module or its member)."""
        return any(
            r in self.modules or r.split(".")[0] in {m.split(".")[0] for m in self.modules}
            for r in self.resolve(node)
        )


def dynamic_lookups(tree: ast.AST, table: SymbolTable) -> Iterator[ast.AST]:
    """Lookups whose target the source does not show: the escape hatches around name checks.

    ``getattr(module, <non-constant>)``, ``importlib.import_module(<non-constant>)``,
    ``__import__(...)``, ``sys.modules`` and ``<module>.__dict__`` / ``vars(<module>)``
    (a module's namespace as a dictionary), ``compile(...)`` (code from a string).
    """
    return (node for node in ast.walk(tree) if _is_dynamic(node, table))


def _is_dynamic(node: ast.AST, table: SymbolTable) -> bool:
    if isinstance(node, ast.Call):
        funcs = table.resolve(node.func)
        args = node.args
        if funcs & LOOKUPS and len(args) >= 2 and _const_str(args[1]) is None:
            return table.refers_to_module(args[0])
        if funcs & IMPORTERS and (not args or _const_str(args[0]) is None):
            return True
        if "__import__" in funcs or "compile" in funcs:
            return True
        return "vars" in funcs and bool(args) and table.refers_to_module(args[0])
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        if node.attr == "__dict__" and table.refers_to_module(node.value):
            return True
        return "sys.modules" in table.resolve(node)
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in table.names:
        return "sys.modules" in table.resolve(node)
    return False


def _own_returns(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[ast.Return]:
    """The return statements of ``fn`` itself, not of functions nested in it."""
    stack: list[ast.AST] = list(fn.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            yield node
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))


def _const_str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _names(target: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(target) if isinstance(n, ast.Name)]


def _pairs(target: ast.AST, value: ast.AST | None) -> Iterator[tuple[str, ast.AST | None]]:
    """(name, the expression it gets) for an assignment target; unpacking pairs elements when it can."""
    if isinstance(target, ast.Name):
        yield target.id, value
    elif isinstance(target, ast.Tuple | ast.List):
        if isinstance(value, ast.Tuple | ast.List) and len(value.elts) == len(target.elts):
            for t, v in zip(target.elts, value.elts, strict=True):
                yield from _pairs(t, v)
        else:
            for t in target.elts:
                yield from _pairs(t, None)
    elif isinstance(target, ast.Starred):
        yield from _pairs(target.value, None)
