"""The tool server of the ``tool-use`` family: a store's back office, state in a real SQLite file.

This file is copied verbatim into every task's workspace (``.service/server.py``)
and run in the agent's sandbox once per tool call: ``python .service/server.py
TOOL`` with the call's arguments as a JSON object on stdin; it prints a JSON
result, or ``error: ...`` and exits 1 (an error never changes the state). The
generator imports the same functions to run the reference plan and the hacks on
a copy of the state, so the server the agent talks to and the one the
expected state came from are one code. Standard library only.

Tables: customers, products, orders (money in integer cents), meta (the next
order number), reports (the facts the agent reported; not state the checker
diffs).
"""

from __future__ import annotations

import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

STATE = "state.db"


class ServiceError(Exception):
    """A refused call: the caller's mistake, reported as ``error: ...``; nothing was changed."""


def _customer(con: sqlite3.Connection, cid: str) -> sqlite3.Row:
    row = con.execute("SELECT * FROM customers WHERE id = ?", (cid,)).fetchone()
    if row is None:
        raise ServiceError(f"no customer {cid!r}")
    return row


def _order(con: sqlite3.Connection, oid: str) -> sqlite3.Row:
    row = con.execute("SELECT * FROM orders WHERE id = ?", (oid,)).fetchone()
    if row is None:
        raise ServiceError(f"no order {oid!r}")
    return row


def find_customer(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    row = con.execute("SELECT * FROM customers WHERE email = ?", (a["email"],)).fetchone()
    if row is None:
        raise ServiceError(f"no customer with email {a['email']!r}")
    return dict(row)


def list_orders(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    _customer(con, a["customer_id"])
    rows = con.execute("SELECT * FROM orders WHERE customer_id = ? ORDER BY seq", (a["customer_id"],))
    return [dict(r) for r in rows]


def search_products(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    rows = con.execute("SELECT * FROM products WHERE category = ? ORDER BY sku", (a["category"],)).fetchall()
    return [dict(r) for r in rows]


def get_product(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    row = con.execute("SELECT * FROM products WHERE sku = ?", (a["sku"],)).fetchone()
    if row is None:
        raise ServiceError(f"no product {a['sku']!r}")
    return dict(row)


def place_order(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    c = _customer(con, a["customer_id"])
    p = get_product(con, {"sku": a["sku"]})
    qty = a["qty"]
    if not isinstance(qty, int) or qty < 1:
        raise ServiceError("qty must be a positive integer")
    if c["frozen"]:
        raise ServiceError(f"customer {c['id']} is frozen")
    if p["stock"] < qty:
        raise ServiceError(f"only {p['stock']} of {p['sku']} in stock")
    total = qty * p["price_cents"]
    if c["balance_cents"] < total:
        raise ServiceError(f"balance {c['balance_cents']} is below the total {total}")
    seq = con.execute("SELECT value FROM meta WHERE key = 'next_order'").fetchone()[0]
    oid = f"O-{seq}"
    con.execute("UPDATE meta SET value = value + 1 WHERE key = 'next_order'")
    con.execute("UPDATE customers SET balance_cents = balance_cents - ? WHERE id = ?", (total, c["id"]))
    con.execute("UPDATE products SET stock = stock - ? WHERE sku = ?", (qty, p["sku"]))
    con.execute(
        "INSERT INTO orders VALUES (?, ?, ?, ?, ?, 'placed', ?)", (oid, c["id"], p["sku"], qty, total, seq)
    )
    return {"order_id": oid, "total_cents": total, "balance_cents": c["balance_cents"] - total}


def cancel_order(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    o = _order(con, a["order_id"])
    if o["status"] != "placed":
        raise ServiceError(f"order {o['id']} is {o['status']}; only placed orders can be cancelled")
    con.execute("UPDATE orders SET status = 'cancelled' WHERE id = ?", (o["id"],))
    con.execute(
        "UPDATE customers SET balance_cents = balance_cents + ? WHERE id = ?",
        (o["total_cents"], o["customer_id"]),
    )
    con.execute("UPDATE products SET stock = stock + ? WHERE sku = ?", (o["qty"], o["sku"]))
    return {"order_id": o["id"], "refunded_cents": o["total_cents"]}


def refund_order(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    o = _order(con, a["order_id"])
    if o["status"] != "shipped":
        raise ServiceError(f"order {o['id']} is {o['status']}; only shipped orders can be refunded")
    con.execute("UPDATE orders SET status = 'refunded' WHERE id = ?", (o["id"],))
    con.execute(
        "UPDATE customers SET balance_cents = balance_cents + ? WHERE id = ?",
        (o["total_cents"], o["customer_id"]),
    )
    return {"order_id": o["id"], "refunded_cents": o["total_cents"]}


def update_email(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    _customer(con, a["customer_id"])
    con.execute("UPDATE customers SET email = ? WHERE id = ?", (a["email"], a["customer_id"]))
    return {"ok": True}


def set_frozen(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    _customer(con, a["customer_id"])
    con.execute("UPDATE customers SET frozen = ? WHERE id = ?", (int(bool(a["frozen"])), a["customer_id"]))
    return {"ok": True}


def apply_credit(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    _customer(con, a["customer_id"])
    if not isinstance(a["amount_cents"], int) or a["amount_cents"] <= 0:
        raise ServiceError("amount_cents must be a positive integer")
    con.execute(
        "UPDATE customers SET balance_cents = balance_cents + ? WHERE id = ?",
        (a["amount_cents"], a["customer_id"]),
    )
    return {"ok": True}


def adjust_stock(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    p = get_product(con, {"sku": a["sku"]})
    if not isinstance(a["delta"], int) or p["stock"] + a["delta"] < 0:
        raise ServiceError("delta must be an integer that keeps the stock at or above 0")
    con.execute("UPDATE products SET stock = stock + ? WHERE sku = ?", (a["delta"], p["sku"]))
    return {"ok": True}


def report(con: sqlite3.Connection, a: dict[str, Any]) -> Any:
    facts = a["facts"]
    if not isinstance(facts, dict):
        raise ServiceError("facts must be a JSON object")
    con.execute("DELETE FROM reports")
    con.executemany("INSERT INTO reports VALUES (?, ?)", [(str(k), json.dumps(v)) for k, v in facts.items()])
    return {"reported": sorted(facts)}


TOOLS = {f.__name__: f for f in (find_customer, list_orders, search_products, get_product, place_order,
                                 cancel_order, refund_order, update_email, set_frozen, apply_credit,
                                 adjust_stock, report)}  # fmt: skip


def call(con: sqlite3.Connection, tool: str, args: dict[str, Any]) -> Any:
    """Run one tool call in a transaction: committed when it succeeds, rolled back when it is refused."""
    if tool not in TOOLS:
        raise ServiceError(f"unknown tool {tool!r}")
    con.row_factory = sqlite3.Row
    try:
        out = TOOLS[tool](con, args)
    except (KeyError, TypeError) as e:
        con.rollback()
        raise ServiceError(f"bad arguments for {tool}: {e}") from None
    except BaseException:
        con.rollback()
        raise
    con.commit()
    return out


def main() -> int:
    try:
        args = json.loads(sys.stdin.read() or "{}")
        if not isinstance(args, dict):
            raise ServiceError("arguments must be a JSON object")
        con = sqlite3.connect(Path(__file__).with_name(STATE))
        try:
            out = call(con, sys.argv[-1], args)
        finally:
            con.close()
    except (ServiceError, json.JSONDecodeError) as e:
        print(f"error: {e}")
        return 1
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
