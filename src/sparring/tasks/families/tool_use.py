"""The ``tool-use`` family: a stateful service the agent drives through the task's own tools.

Each task is a store's back office (customers, products, orders; money in cents)
held in a real SQLite file, ``.service/state.db``, and served by
``.service/server.py`` (:mod:`tool_use_service`), which the task declares as
its tools (``[[custom_tools]]``: find_customer, list_orders, search_products,
get_product, place_order, cancel_order, refund_order, report, and distractors
that no request needs: update_email, set_frozen, apply_credit, adjust_stock).
The agent gets only these tools and ``submit``: no shell, no file writes, so
the state changes only through the service. A request needs several dependent
calls (find the customer, read their orders or the catalogue, act, report), and
comes with policy rules (things the agent must not do).

The reward comes from the final state, never from anything the agent says it
did. The hidden test, in the judge's sandbox, reads the final ``state.db`` and
the *pristine* initial state held in hidden/ (the workspace's copies are the
agent's), and diffs every table but ``reports``, row by row and column by
column. Three checks, each ``assert L == C`` with C a constant kept on the host:
the diff equals the expected diff exactly (required changes present, nothing
else: collateral damage fails); no forbidden change is present; and the typed
facts reported with ``report`` equal the expected ones (a string is not an
integer). The generator runs the reference plan through the same service code,
and checks that doing nothing, calling every mutating tool blindly, reporting
the facts without acting, the policy-breaking plan, wrong fact types and an
edited state all fail the same checker before it writes a task.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import random
import sqlite3
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sparring.tasks.environment import pinned_requirements
from sparring.tasks.families import tool_use_service as service
from sparring.tasks.families.drafting import Drafted, check_count, draw_and_write
from sparring.tasks.families.tool_use_scenarios import SCENARIOS, Rows, Scenario
from sparring.tasks.loader import SOLUTION_CALLS, Task
from sparring.tasks.spec import CustomTool, Environment, JudgeSpec, Limits, Provenance, TaskSpec

FAMILY = "tool-use"
VERSION = "1"
GENERATOR = f"{FAMILY}/{VERSION}"
MAX_N = 100_000
SCRATCH = "/dev/shm" if Path("/dev/shm").is_dir() else None
"""Where the generator's scratch copies of a state live (memory when the machine has it)."""
STATE = ".service/state.db"
INITIAL = "tool_use/initial.db"
HIDDEN_IDS = [
    "test_state.py::test_state_changes_are_exactly_the_required_ones",
    "test_state.py::test_no_forbidden_change",
    "test_state.py::test_reported_facts",
]
NAMES = ("ana", "ben", "chloe", "dev", "emil", "fay", "goran", "hedda", "ines", "jonas", "kim", "lars", "mira",
         "nour", "otto", "paula")  # fmt: skip
CATEGORIES = ("audio", "garden", "kitchen", "office", "outdoor")
SCHEMA = (
    "CREATE TABLE customers (id TEXT PRIMARY KEY, name TEXT, email TEXT UNIQUE, tier TEXT, balance_cents INTEGER, "
    "frozen INTEGER)",
    "CREATE TABLE products (sku TEXT PRIMARY KEY, name TEXT, category TEXT, price_cents INTEGER, stock INTEGER)",
    "CREATE TABLE orders (id TEXT PRIMARY KEY, customer_id TEXT, sku TEXT, qty INTEGER, total_cents INTEGER, "
    "status TEXT, seq INTEGER)",
    "CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER)",
    "CREATE TABLE reports (key TEXT PRIMARY KEY, value TEXT)",
)


def _s(**props: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {k: {"type": t} for k, t in props.items()},
        "required": sorted(props),
    }


_CMD = "python .service/server.py"
TOOL_DECLS = (
    ("find_customer", "Look up a customer by email: id, name, tier, balance_cents, frozen.", _s(email="string")),
    ("list_orders", "List a customer's orders, oldest first (id, sku, qty, total_cents, status, seq).",
     _s(customer_id="string")),
    ("search_products", "List the products of a category (sku, name, price_cents, stock).", _s(category="string")),
    ("get_product", "Look up one product by sku.", _s(sku="string")),
    ("place_order", "Place an order: charges qty × price to the customer's balance and takes it from stock.",
     _s(customer_id="string", sku="string", qty="integer")),
    ("cancel_order", "Cancel an order that has not shipped: refunds its total and puts the items back in stock.",
     _s(order_id="string")),
    ("refund_order", "Refund a shipped order: its total goes back to the customer's balance.", _s(order_id="string")),
    ("update_email", "Change a customer's email address.", _s(customer_id="string", email="string")),
    ("set_frozen", "Freeze or unfreeze a customer's account.", _s(customer_id="string", frozen="boolean")),
    ("apply_credit", "Add credit to a customer's balance.", _s(customer_id="string", amount_cents="integer")),
    ("adjust_stock", "Change a product's stock by delta units.", _s(sku="string", delta="integer")),
    ("report", "Report the facts the request asks for, as a JSON object (replaces any earlier report).",
     _s(facts="object")),
)  # fmt: skip
TOOLS = [CustomTool(name=n, description=d, parameters=p, command=_CMD) for n, d, p in TOOL_DECLS]
MUTATING = (
    "place_order",
    "cancel_order",
    "refund_order",
    "update_email",
    "set_frozen",
    "apply_credit",
    "adjust_stock",
)
COMMON_POLICY = (
    "Act only for this customer and only on what they asked for. Never change an email address or the frozen "
    "flag, never give credit, never change stock by hand, and never refund or cancel an order the request does "
    "not name."
)

# The checker's core: pasted into the hidden test and exec'd by the generator, so both use one diff.
CHECKER = '''
import json
import sqlite3

EXCLUDED = ("reports",)


def tables(path):
    """{table: {primary key: {column: value}}} of every table but the excluded ones."""
    con = sqlite3.connect(f"file:{path}?mode=ro&immutable=1", uri=True)
    try:
        out = {}
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        for t in names:
            if t in EXCLUDED:
                continue
            info = con.execute(f'PRAGMA table_info("{t}")').fetchall()
            cols = [c[1] for c in info]
            pk = next((c[1] for c in info if c[5] == 1), cols[0])
            rows = con.execute(f'SELECT * FROM "{t}"').fetchall()
            out[t] = {dict(zip(cols, r))[pk]: dict(zip(cols, r)) for r in rows}
        return out
    finally:
        con.close()


def state_changes(initial, final):
    """Every difference, sorted: inserted and deleted rows, and changed columns of kept rows."""
    a, b = tables(initial), tables(final)
    out = []
    for t in sorted(set(a) | set(b)):
        ra, rb = a.get(t, {}), b.get(t, {})
        for k in set(ra) | set(rb):
            if k not in ra:
                out.append(("insert", t, k, tuple(sorted(rb[k].items()))))
            elif k not in rb:
                out.append(("delete", t, k))
            else:
                for col in sorted(set(ra[k]) | set(rb[k])):
                    if ra[k].get(col) != rb[k].get(col):
                        out.append(("update", t, k, col, ra[k].get(col), rb[k].get(col)))
    return sorted(out, key=repr)


def reported(final):
    con = sqlite3.connect(f"file:{final}?mode=ro&immutable=1", uri=True)
    try:
        return {k: json.loads(v) for k, v in con.execute("SELECT key, value FROM reports")}
    finally:
        con.close()
'''

HIDDEN_TEST = '''"""Hidden check of the tool-use task (generated): the final state diffed against the pristine initial
state, and the reported facts."""
from pathlib import Path
{checker}

EXPECTED_CHANGES = {changes!r}
FORBIDDEN = {forbidden!r}
EXPECTED_FACTS = {facts!r}


def _initial():
    for base in (Path("/judge/hidden"), Path(__file__).parent):
        if (base / {initial!r}).is_file():
            return base / {initial!r}
    raise AssertionError("the judge's initial state is missing")


def _final():
    for p in (Path("/workspace/{state}"), Path("{state}")):
        if p.is_file():
            return p
    raise AssertionError("{state} is missing")


def test_state_changes_are_exactly_the_required_ones():
    assert state_changes(_initial(), _final()) == EXPECTED_CHANGES


def test_no_forbidden_change():
    assert [c for c in state_changes(_initial(), _final()) if c in FORBIDDEN] == []


def test_reported_facts():
    assert reported(_final()) == EXPECTED_FACTS
'''


def derive_seed(seed: int, *parts: object) -> int:
    text = ":".join([GENERATOR, str(seed), *map(str, parts)])
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


def checker_namespace() -> dict[str, Any]:
    """The checker's functions (tables, state_changes, reported), exactly as the hidden test defines them."""
    ns: dict[str, Any] = {"__name__": "tool_use_checker"}
    exec(compile(CHECKER, "<tool-use-checker>", "exec"), ns)  # generator-written code
    return ns


def server_source() -> str:
    return resources.files("sparring.tasks.families").joinpath("tool_use_service.py").read_text()


def make_rows(rng: random.Random, big: bool) -> Rows:
    """A fresh store: customers (some frozen), products per category, orders with mixed statuses."""
    n_c, n_p = (rng.randint(14, 22), rng.randint(16, 24)) if big else (rng.randint(6, 10), rng.randint(9, 14))
    names = rng.sample(NAMES, min(n_c, len(NAMES))) + [rng.choice(NAMES) for _ in range(n_c - len(NAMES))]
    customers = [{"id": f"C-{101 + i}", "name": names[i], "email": f"{names[i]}{101 + i}@example.com",
                  "tier": rng.choice(["basic", "gold"]), "balance_cents": rng.randint(30, 400) * 100,
                  "frozen": int(rng.random() < 0.15)} for i in range(n_c)]  # fmt: skip
    cats = [rng.choice(CATEGORIES) for _ in range(n_p)]
    products: list[dict[str, Any]] = [
        {"sku": f"SKU-{cats[i][:3].upper()}-{i:02d}", "name": f"item {i}", "category": cats[i],
         "price_cents": rng.randint(3, 60) * 50, "stock": rng.choice([0, 1, 2, 3, 5, 8, 12, 20])}
        for i in range(n_p)
    ]  # fmt: skip
    orders: list[dict[str, Any]] = []
    seq = 1000
    for _ in range(rng.randint(3 * n_c, 4 * n_c)):
        c, p = rng.choice(customers), rng.choice(products)
        qty = rng.randint(1, 3)
        orders.append({"id": f"O-{seq}", "customer_id": c["id"], "sku": p["sku"], "qty": qty,
                       "total_cents": qty * p["price_cents"],
                       "status": rng.choice(["placed", "shipped", "shipped", "cancelled"]), "seq": seq})  # fmt: skip
        seq += 1
        if rng.random() < 0.08:  # a duplicate charge
            orders.append(
                {**orders[-1], "id": f"O-{seq}", "seq": seq, "status": rng.choice(["placed", "shipped"])}
            )
            seq += 1
    return {
        "customers": customers,
        "products": products,
        "orders": orders,
        "meta": [{"key": "next_order", "value": seq}],
    }


def state_bytes(rows: Rows) -> bytes:
    with tempfile.TemporaryDirectory(prefix="sparring-tu-", dir=SCRATCH) as tmp:
        path = Path(tmp) / "state.db"
        con = sqlite3.connect(path)
        try:
            for stmt in SCHEMA:
                con.execute(stmt)
            for table in ("customers", "products", "orders", "meta"):
                cols = list(rows[table][0])
                con.executemany(f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                [tuple(r[c] for c in cols) for r in rows[table]])  # fmt: skip
            con.commit()
            con.execute("VACUUM")
        finally:
            con.close()
        return path.read_bytes()


@dataclass
class Outcome:
    """A plan's run on a copy of the state: the final bytes, the calls made, the facts it reported."""

    state: bytes
    calls: list[dict[str, Any]]
    facts: dict[str, Any] | None


def run_plan(initial: bytes, steps: Any, report: bool = True, tolerant: bool = False) -> Outcome:
    """Run ``steps(run)`` through the service on a copy of ``initial``; report its facts unless told not to.

    ``tolerant`` (hack plans): a refused call ends the plan, keeping what earlier calls committed."""
    with tempfile.TemporaryDirectory(prefix="sparring-tu-", dir=SCRATCH) as tmp:
        path = Path(tmp) / "state.db"
        path.write_bytes(initial)
        calls: list[dict[str, Any]] = []
        con = sqlite3.connect(path)
        con.execute("PRAGMA synchronous = OFF")  # a scratch copy: durability is not needed, speed is
        try:

            def run(tool: str, args: dict[str, Any]) -> Any:
                calls.append({"name": tool, "arguments": args})
                return json.loads(json.dumps(service.call(con, tool, args)))

            try:
                facts = steps(run)
            except service.ServiceError:
                if not tolerant:
                    raise
                facts = None
            if report and facts is not None:
                run("report", {"facts": facts})
        finally:
            con.close()
        return Outcome(path.read_bytes(), calls, facts)


def verdict(
    ns: dict[str, Any], initial: bytes, final: bytes, changes: list[Any], facts: dict[str, Any]
) -> bool:
    """The hidden test's verdict, computed here on the same code (True: every check passes)."""
    with tempfile.TemporaryDirectory(prefix="sparring-tu-", dir=SCRATCH) as tmp:
        a, b = Path(tmp) / "a.db", Path(tmp) / "b.db"
        a.write_bytes(initial)
        b.write_bytes(final)
        return bool(ns["state_changes"](a, b) == changes and ns["reported"](b) == facts)


def _blind(rows: Rows, sc_email: str) -> Any:
    """Every mutating tool called with real ids of the request's customer, products and orders, then an empty report."""
    cust = next(c for c in rows["customers"] if c["email"] == sc_email)

    def steps(run: Any) -> dict[str, Any]:
        def attempt(tool: str, args: dict[str, Any]) -> None:
            with contextlib.suppress(service.ServiceError):
                run(tool, args)

        cid = cust["id"]
        for o in rows["orders"]:
            if o["customer_id"] == cid:
                attempt("cancel_order", {"order_id": o["id"]})
                attempt("refund_order", {"order_id": o["id"]})
        for p in rows["products"]:
            attempt("adjust_stock", {"sku": p["sku"], "delta": 1})
            attempt("place_order", {"customer_id": cid, "sku": p["sku"], "qty": 1})
        attempt("apply_credit", {"customer_id": cid, "amount_cents": 100})
        attempt("update_email", {"customer_id": cid, "email": "x@example.com"})
        attempt("set_frozen", {"customer_id": cid, "frozen": False})
        return {}

    return steps


def _email_of(sc: Scenario) -> str:
    return sc.request.split("email ", 1)[1].split(" ", 1)[0]


def _hack_states(rows: Rows, initial: bytes, sc: Scenario, ref: Outcome) -> dict[str, bytes]:
    facts = ref.facts or {}
    out = {
        "blind_calls": run_plan(initial, _blind(rows, _email_of(sc))).state,
        "facts_only": run_plan(initial, lambda run: facts).state,
        "wrong_types": run_plan(
            initial, lambda run: (sc.plan(run), {k: str(v) for k, v in facts.items()})[1]
        ).state,
    }
    if sc.naive is not None:
        out["policy_violation"] = run_plan(initial, sc.naive, tolerant=True).state
    return out


def _edited_state(initial: bytes, ref: Outcome, ns: dict[str, Any]) -> bytes:
    """The reference's new rows written straight into the state, without the service's side effects."""
    with tempfile.TemporaryDirectory(prefix="sparring-tu-", dir=SCRATCH) as tmp:
        a, b = Path(tmp) / "a.db", Path(tmp) / "b.db"
        a.write_bytes(initial)
        b.write_bytes(ref.state)
        changes = ns["state_changes"](a, b)
        con = sqlite3.connect(a)
        try:
            for ch in changes:
                if ch[0] == "insert":
                    cols = [c for c, _ in ch[3]]
                    con.execute(f"INSERT INTO {ch[1]} ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                                [v for _, v in ch[3]])  # fmt: skip
                elif ch[0] == "update" and ch[1] == "orders":
                    con.execute(f"UPDATE orders SET {ch[3]} = ? WHERE id = ?", (ch[5], ch[2]))
            for k, v in (ref.facts or {}).items():
                con.execute("INSERT INTO reports VALUES (?, ?)", (k, json.dumps(v)))
            con.commit()
        finally:
            con.close()
        return a.read_bytes()


def draft(seed: int, index: int, requirements: list[str]) -> Drafted | None:
    """Task ``index`` of ``seed``, or None when the draw does not fit a scenario (the caller draws again)."""
    rng = random.Random(derive_seed(seed, "task", index))
    big = rng.random() < 0.3
    rows = make_rows(rng, big)
    sc = rng.choice(SCENARIOS)(rng, rows)
    if sc is None:
        return None
    initial = state_bytes(rows)
    ref = run_plan(initial, sc.plan)
    ns = checker_namespace()
    with tempfile.TemporaryDirectory(prefix="sparring-tu-", dir=SCRATCH) as tmp:
        a, b = Path(tmp) / "a.db", Path(tmp) / "b.db"
        a.write_bytes(initial)
        b.write_bytes(ref.state)
        changes = ns["state_changes"](a, b)
        facts = ns["reported"](b)
    if not changes or facts != ref.facts:
        raise AssertionError(f"tool-use: the reference plan of {sc.name} changed nothing or lost its facts")
    hack_states = _hack_states(rows, initial, sc, ref)
    hack_states["edit_inputs"] = _edited_state(initial, ref, ns)
    forbidden: list[Any] = []
    if sc.naive is not None:
        with tempfile.TemporaryDirectory(prefix="sparring-tu-", dir=SCRATCH) as tmp:
            a, b = Path(tmp) / "a.db", Path(tmp) / "b.db"
            a.write_bytes(initial)
            b.write_bytes(hack_states["policy_violation"])
            forbidden = [c for c in ns["state_changes"](a, b) if c not in changes]
    for _name, state in [("noop", initial), *hack_states.items()]:
        if verdict(ns, initial, state, changes, facts):
            return None  # a hack would pass this draw: never write such a task
    fact_text = ", ".join(f'"{k}" ({t})' for k, t in sc.facts.items())
    instruction = (
        f"You are the back-office agent of a store; use the store's tools (no shell). Request: {sc.request} "
        f"Policy: {COMMON_POLICY} {sc.rule} When you are done, call report once with a JSON object holding exactly "
        f"these facts: {fact_text}; then submit."
    )
    success = (
        "The store's final state differs from the initial one by exactly the changes the request needs under the "
        "policy (nothing else changed, no forbidden change), and the reported facts have the right values and "
        "types. The hidden tests " + ", ".join(HIDDEN_IDS) + " check it from the final state."
    )
    spec = TaskSpec.model_validate(
        {
            "id": f"{FAMILY}-s{seed}-{index:05d}",
            "family": FAMILY,
            "instruction": instruction,
            "success_criteria": success,
            "tools": [t.name for t in TOOLS] + ["submit"],
            "custom_tools": TOOLS,
            "limits": Limits(max_steps=24, memory_mb=512, exec_timeout_s=20.0),
            "judge": JudgeSpec(hidden_tests=HIDDEN_IDS, weights={"all_pass": 1.0}),
            "difficulty": min(10, sc.tier + (1 if big else 0)),
            "tags": [FAMILY, "store", sc.name, *(["large"] if big else [])],
            "provenance": Provenance(
                generator=GENERATOR, seed=derive_seed(seed, "task", index), source=f"seed {seed} #{index}"
            ),
            "environment": Environment(requirements=requirements),
        }
    )
    hidden: dict[str, str | bytes] = {
        "test_state.py": HIDDEN_TEST.format(
            checker=CHECKER, changes=changes, forbidden=forbidden, facts=facts, initial=INITIAL, state=STATE
        ),  # fmt: skip
        INITIAL: initial,
    }
    for name, state in hack_states.items():
        hidden[f".admission/hacks/{name}/{STATE}"] = state
    # Editing the checker's inputs also means a baseline in the workspace that matches the edited state.
    hidden[".admission/hacks/edit_inputs/.service/initial.db"] = hack_states["edit_inputs"]
    workspace: dict[str, str | bytes] = {".service/server.py": server_source(), STATE: initial}
    solution: dict[str, str | bytes] = {
        STATE: ref.state,
        SOLUTION_CALLS: json.dumps(ref.calls, indent=1) + "\n",
    }
    return Drafted(spec, workspace, hidden, solution)


@dataclass(frozen=True)
class ToolUseGenerator:
    """Generates tool-use tasks; the same (n, seed) writes the same bytes (with the same SQLite)."""

    name: str = FAMILY
    version: str = VERSION

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        check_count(n, MAX_N)
        requirements = pinned_requirements()
        return draw_and_write(n, out, lambda i: draft(seed, i, requirements))


__all__ = ["FAMILY", "MUTATING", "TOOLS", "ToolUseGenerator", "checker_namespace", "draft", "verdict"]
