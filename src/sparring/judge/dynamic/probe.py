"""Withheld expectations: the judge's tests rewritten so the candidate's process never holds a pass.

Runs on the host, over the task's pristine test files. The candidate controls every
byte and every process of the judge's sandbox, including the pytest process that
imports its code, so nothing decided *there* can be trusted. Each ``assert`` of a
judge test file is therefore turned into an *observation*: the test process only
reports the value the candidate's code produced, and the host, which kept the
expected side, decides whether it matches (:mod:`sparring.judge.withheld`).

Three kinds of site, numbered in source order (numbering never depends on the
per-judgement randomness, so a reference run's trace applies to every judgement):

``value``   ``assert L op C`` where ``C`` is a constant the host can evaluate
            (literals, arithmetic on them, names bound once to such values in the
            module or the function, ``pytest.approx(...)`` of them). The probe
            reports ``L``; ``op`` and ``C`` stay on the host, and a name used only
            there is removed from the probe, so the expected value is nowhere in
            the sandbox.
``expr``    any other ``assert E`` whose skeleton the host can evaluate: ``E`` is
            split into *leaves*, its largest sub-expressions that run anyone's code
            (``f(x)``, ``obj.attr``, ``helper(x) + 1``), and a *skeleton* over them
            made of ``not``/``and``/``or``, comparisons, constants and a few pure
            built-ins (``isinstance``, ``type``, ``len``, ``all``, ``sorted``, ...).
            The probe evaluates each leaf (an exception is recorded, not raised)
            and reports the leaves' values as plain data; the skeleton, with its
            operators, constants and polarity, stays on the host, which evaluates it
            over the reported values. ``assert type(f(x)) is int`` leaves only
            ``f(x)`` in the probe: nothing says which truth value, type or bound is
            wanted. Leaves are evaluated eagerly, in source order; where the
            original would have short-circuited, the host never reads them. An
            exception of a leading leaf the original always evaluates (not
            behind ``and``/``or`` or a chained comparison's later operands) is
            raised as the original's would be (``strict=`` in the probe, which
            says only that much of the skeleton's shape); the others' are recorded.
``bool``    the rest, and every ``expr`` site where the reference solution's leaves
            were not plain data (or the host's evaluation disagreed with the
            reference passing): the plan for a candidate is built after the
            reference run, and only those sites fall back. The probe reports
            ``bool(E)`` or ``bool(not E)`` chosen at random per judgement; this is
            NOT a secret: the flip is in the probe's text, so a forger who assumes
            the positive form reads off the expected truth value
            (``redteam.BOOL_POLARITY_FORGERY``). Asserts over objects that are not
            plain data are the residual that only the reference run can protect.
``raises``  ``with pytest.raises(E, match=M) [as info]:``. The probe catches what
            the block raises and reports its class chain and message; ``E`` and
            ``M`` stay on the host.

A passing test on the host is one the test process says ran to the end, whose
every observation matches, and which observed each site at least as often as the
reference solution did (so skipping the hard asserts is a failure, not a pass).
"""

from __future__ import annotations

import ast
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal

from sparring import pyast
from sparring.judge.dynamic.skeleton import (
    HOST_CALLS,
    SINGLETONS,
    _holds_constant,
    _names,
    _NotLiftable,
    _pure,
    _Scope,
    _Skeleton,
    const_value,
)

OBSERVE = "__sparring_obs__"
RAISES = "__sparring_raises__"
LEAVES = "__sparring_leaves__"
IMPORT_LINE = f"from judge_observe import observe as {OBSERVE}, raises as {RAISES}, leaves as {LEAVES}\n"
VALUE_OPS: dict[type[ast.cmpop], str] = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not",
}  # fmt: skip
MIRROR = {"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
"""``C op L`` as ``L op' C``."""
COMPLEMENT: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq, ast.NotEq: ast.Eq, ast.Lt: ast.GtE, ast.GtE: ast.Lt, ast.Gt: ast.LtE, ast.LtE: ast.Gt,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}  # fmt: skip


@dataclass(frozen=True)
class Site:
    """What the host expects of one site's observations."""

    kind: Literal["value", "expr", "bool", "raises"]
    op: str = "=="
    """value: the comparison, observed value on the left (``in``: observed in C; ``contains``: C in observed)."""
    expected: Any = None
    """value: the constant; bool: the expected truth value; raises: exception class names accepted."""
    approx: tuple[float | None, float | None] | None = None
    """value with ``pytest.approx``: (rel, abs) as given (None: pytest's default)."""
    match: str | None = None
    """raises: the ``match=`` pattern."""
    leaves: int = 0
    """expr: how many leaves each observation carries (``expected`` is the skeleton's source)."""
    env: tuple[tuple[str, Any], ...] = ()
    """expr: the skeleton's constants, by name."""
    file: str = ""
    line: int = 0


@dataclass
class ProbePlan:
    """Probe sources to run in the sandbox, and the sites the host keeps."""

    files: dict[str, str] = field(default_factory=dict)
    sites: dict[int, Site] = field(default_factory=dict)
    withheld_names: int = 0
    """Constant names removed from the probes because only withheld sides used them."""


def _is_approx(node: ast.AST) -> bool:
    f = node.func if isinstance(node, ast.Call) else None
    return (isinstance(f, ast.Attribute) and f.attr == "approx" and isinstance(f.value, ast.Name)
            and f.value.id == "pytest") or (isinstance(f, ast.Name) and f.id == "approx")  # fmt: skip


def _approx_spec(node: ast.Call, scope: _Scope) -> tuple[bool, Any, tuple[float | None, float | None]]:
    if len(node.args) != 1:
        return False, None, (None, None)
    ok, value = const_value(node.args[0], scope)
    tol: dict[str, float | None] = {"rel": None, "abs": None}
    for kw in node.keywords:
        if kw.arg not in tol:
            return False, None, (None, None)
        k_ok, v = const_value(kw.value, scope)
        if not k_ok or not isinstance(v, int | float):
            return False, None, (None, None)
        tol[kw.arg] = float(v)
    return ok, value, (tol["rel"], tol["abs"])


def _scope_consts(body: list[ast.stmt], parent: _Scope | None, stores: Counter[str]) -> _Scope:
    """Names assigned once (in the whole scope) to a constant expression at the top level of ``body``."""
    scope = _Scope({}, parent)
    for st in body:
        if isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name):
            name = st.targets[0].id
            if stores[name] == 1:
                ok, v = const_value(st.value, scope)
                if ok:
                    scope.consts[name] = v
    return scope


def _stores(node: ast.AST, nested: bool) -> Counter[str]:
    """How often each name is bound in ``node`` (nested function bodies included when ``nested``)."""
    c: Counter[str] = Counter()
    stack = [node]
    while stack:
        n = stack.pop()
        for ch in ast.iter_child_nodes(n):
            if isinstance(ch, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and not nested:
                if not isinstance(ch, ast.Lambda):
                    c[ch.name] += 1
                continue
            if isinstance(ch, ast.Name) and isinstance(ch.ctx, ast.Store | ast.Del):
                c[ch.id] += 1
            elif isinstance(ch, ast.arg):
                c[ch.arg] += 2  # a parameter is never a constant
            elif isinstance(ch, ast.Global | ast.Nonlocal):
                for name in ch.names:
                    c[name] += 2
            elif isinstance(ch, ast.alias):
                c[(ch.asname or ch.name).split(".")[0]] += 1
            elif isinstance(ch, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                c[ch.name] += 1
            stack.append(ch)
    return c


class _Rewriter(ast.NodeTransformer):
    def __init__(
        self,
        rel: str,
        plan: ProbePlan,
        next_id: int,
        rng: random.Random,
        module: _Scope,
        fallback: frozenset[int] = frozenset(),
        rebound: frozenset[str] = frozenset(),
    ) -> None:
        self.rel = rel
        self.fallback = fallback
        """Sites that stay truth-valued (``bool``) even where a skeleton exists (from the reference run)."""
        self.rebound = rebound
        """Built-in names the file binds itself: not the host's built-ins."""
        self.plan = plan
        self.next_id = next_id
        self.rng = rng
        self.scope = module
        self.stripped: Counter[str] = Counter()
        """Loads of constant names that moved out of the probe with a withheld side."""

    def _site(self, site: Site) -> int:
        sid = self.next_id
        self.next_id += 1
        self.plan.sites[sid] = site
        return sid

    def _obs(self, sid: int, value: ast.expr, like: ast.AST) -> ast.stmt:
        call = ast.Call(ast.Name(OBSERVE, ast.Load()), [ast.Constant(sid), value], [])
        return ast.copy_location(ast.Expr(call), like)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return self._function(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self._function(node)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        outer = self.scope
        self.scope = _scope_consts(node.body, outer, _stores(node, nested=True))
        try:
            self.generic_visit(node)
        finally:
            self.scope = outer
        return node

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        t = node.test
        if isinstance(t, ast.Compare) and len(t.ops) == 1 and type(t.ops[0]) in VALUE_OPS:
            site = self._value_site(t)
            if site is not None:
                return site
        if self.next_id not in self.fallback:
            lifted = self._expr_site(node)
            if lifted is not None:
                return lifted
        return self._bool_site(node)

    def _expr_site(self, node: ast.Assert) -> ast.stmt | None:
        sk = _Skeleton(self.scope, self.rebound)
        try:
            skeleton = sk.lift(node.test)
        except _NotLiftable:
            return None
        if not sk.leaves:
            return None  # nothing of the candidate's in it: a constant assert
        self.stripped.update(sk.const_names)
        site = Site("expr", expected=ast.unparse(skeleton), leaves=len(sk.leaves), env=tuple(sk.consts.items()),
                    file=self.rel, line=node.lineno)  # fmt: skip
        sid = self._site(site)
        noargs = ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                               defaults=[])  # fmt: skip
        thunks: list[ast.expr] = [ast.Lambda(noargs, self.visit(leaf)) for leaf in sk.leaves]
        strict = [ast.keyword("strict", ast.Constant(sk.strict()))] if sk.strict() else []
        call = ast.Call(ast.Name(LEAVES, ast.Load()), [ast.Constant(sid), *thunks], strict)
        return ast.copy_location(ast.Expr(call), node)

    def _value_site(self, t: ast.Compare) -> ast.stmt | None:
        op = VALUE_OPS[type(t.ops[0])]
        left, right = t.left, t.comparators[0]
        for observed, const_side, mirrored in ((left, right, False), (right, left, True)):
            if isinstance(const_side, ast.Call) and _is_approx(const_side):
                if op not in ("==", "!="):
                    continue
                ok, value, tol = _approx_spec(const_side, self.scope)
                if not ok:
                    continue
                site = Site("value", op, value, approx=tol, file=self.rel, line=t.lineno)
            else:
                ok, value = const_value(const_side, self.scope)
                if not ok or (op in ("is", "is not") and not any(value is s for s in SINGLETONS)):
                    continue
                if mirrored:
                    if op in ("in", "not in"):
                        op = "contains" if op == "in" else "not contains"
                    elif op in MIRROR:
                        op = MIRROR[op]
                    else:
                        continue
                site = Site("value", op, value, file=self.rel, line=t.lineno)
            if _names(observed) & set(self.scope.env()) == _names(observed) and _pure(observed, self.scope):
                continue  # both sides constant: nothing of the candidate's is observed
            if _holds_constant(observed, self.scope, self.rebound):
                return None  # ``abs(f(x) - 3.25) < 1e-6``: an expr site keeps 3.25 on the host too
            self.stripped.update(n.id for n in ast.walk(const_side) if isinstance(n, ast.Name))
            sid = self._site(site)
            return self._obs(sid, self.visit(observed), t)
        return None

    def _bool_site(self, node: ast.Assert) -> ast.stmt:
        test = self.visit(node.test)
        expected = True
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, expected = test.operand, False
        if self.rng.random() < 0.5:
            expected = not expected
            if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in COMPLEMENT:
                test = ast.Compare(test.left, [COMPLEMENT[type(test.ops[0])]()], test.comparators)
            else:
                test = ast.UnaryOp(ast.Not(), test)
        value = ast.Call(ast.Name("bool", ast.Load()), [test], [])
        sid = self._site(Site("bool", expected=expected, file=self.rel, line=node.lineno))
        return self._obs(sid, value, node)

    def visit_With(self, node: ast.With) -> ast.AST:
        self.generic_visit(node)
        if len(node.items) != 1:
            return node
        item = node.items[0]
        call = item.context_expr
        f = call.func if isinstance(call, ast.Call) else None
        is_raises = (isinstance(f, ast.Attribute) and f.attr == "raises" and isinstance(f.value, ast.Name)
                     and f.value.id == "pytest") or (isinstance(f, ast.Name) and f.id == "raises")  # fmt: skip
        if not is_raises or not isinstance(call, ast.Call) or len(call.args) != 1:
            return node
        names = _exception_names(call.args[0])
        match: str | None = None
        for kw in call.keywords:
            if kw.arg != "match":
                return node
            ok, m = const_value(kw.value, self.scope)
            if not ok or not isinstance(m, str):
                return node
            match = m
        if not names:
            return node
        sid = self._site(Site("raises", expected=tuple(names), match=match, file=self.rel, line=node.lineno))
        item.context_expr = ast.copy_location(
            ast.Call(ast.Name(RAISES, ast.Load()), [ast.Constant(sid)], []), call
        )
        return node


def _exception_names(node: ast.AST) -> list[str]:
    """Class names of ``pytest.raises``'s first argument: a name, a dotted name, or a tuple of them."""
    items = node.elts if isinstance(node, ast.Tuple) else [node]
    out: list[str] = []
    for it in items:
        if isinstance(it, ast.Name):
            out.append(it.id)
        elif isinstance(it, ast.Attribute):
            out.append(it.attr)
        else:
            return []
    return out


def _inert(node: ast.AST) -> bool:
    """Evaluating ``node`` runs nothing of anyone's (a same-named ``x = f()`` elsewhere is never dropped)."""
    return _pure(node, _Scope({n: None for n in _names(node)}))


def _drop_withheld(tree: ast.Module, stripped: Counter[str]) -> int:
    """Remove ``NAME = <constant>`` statements of names that moved out with a withheld side and that the
    probe no longer reads anywhere, then those of the names only they read (``B = A + 1``), and so on.

    Loads are counted in the *rewritten* tree: an assert's message is dropped with the assert, so
    ``assert got == EXPECTED, f"want {EXPECTED}"`` leaves no reader of ``EXPECTED`` behind (counted in the
    original, the message kept the expected value in the probe, readable by the candidate)."""
    feeds = {n for n, k in stripped.items() if k}
    holders = [tree, *[n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]]
    removed = 0
    while True:
        loads = Counter(
            n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        )
        gone = {n for n in feeds if not loads[n]}
        dropped = 0
        for holder in holders:
            body: list[ast.stmt] = holder.body
            for i, st in enumerate(body):
                if (isinstance(st, ast.Assign) and len(st.targets) == 1 and isinstance(st.targets[0], ast.Name)
                        and st.targets[0].id in gone and _inert(st.value)):  # fmt: skip
                    feeds |= _names(st.value)
                    body[i] = ast.copy_location(ast.Pass(), st)
                    dropped += 1
        if not dropped:
            return removed
        removed += dropped


def rewrite_file(
    source: str, rel: str, plan: ProbePlan, rng: random.Random, fallback: frozenset[int] = frozenset()
) -> str:
    """The probe version of one test file; its sites are added to ``plan``."""
    tree = pyast.parse(source)
    stores = _stores(tree, nested=True)
    module = _scope_consts(tree.body, None, stores)
    # ``from helpers import *`` may bind any of them: then none is the host's.
    rebound = frozenset(n for n in HOST_CALLS if stores[n] or stores["*"])
    rw = _Rewriter(rel, plan, len(plan.sites), rng, module, fallback, rebound)
    tree = rw.visit(tree)
    plan.withheld_names += _drop_withheld(tree, rw.stripped)
    ast.fix_missing_locations(tree)
    # The import goes after any ``from __future__`` lines, which must stay first.
    at = 0
    for i, st in enumerate(tree.body):
        if isinstance(st, ast.ImportFrom) and st.module == "__future__":
            at = i + 1
    tree.body[at:at] = pyast.parse(IMPORT_LINE).body
    return ast.unparse(tree) + "\n"


def build_plan(files: dict[str, bytes], seed: int, fallback: frozenset[int] = frozenset()) -> ProbePlan:
    """Probes of every test file in ``files`` (rel path -> pristine bytes), sites numbered in path order.

    ``fallback``: the ``expr`` sites to keep truth-valued (where the reference run showed the host cannot
    evaluate their skeleton); numbering is the same either way. A file that does not parse is passed
    through unchanged: its tests error at collection, as they would.
    """
    plan = ProbePlan()
    rng = random.Random(seed)
    for rel in sorted(files):
        data = files[rel]
        try:
            text = data.decode("utf-8-sig")
            plan.files[rel] = rewrite_file(text, rel, plan, rng, fallback)
        except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError):
            plan.files[rel] = data.decode("utf-8", errors="replace")
    return plan
