"""Scenarios of the ``tool-use`` family: what the customer asks, the policy, the reference plan.

A scenario picks its targets from the generated state and runs its reference plan
through the real service (:mod:`tool_use_service`), recording every call, so the
oracle later replays exactly these calls. It also names a *naive* plan: what an
agent that ignores the policy does (a forbidden change), which must score 0.
A scenario returns None when the state does not allow it (the caller redraws).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Run = Callable[[str, dict[str, Any]], Any]
"""Runs one tool call on the state and returns its result (raises ServiceError when refused)."""
Rows = dict[str, list[dict[str, Any]]]

RESERVE_CENTS = 2000


@dataclass(frozen=True)
class Scenario:
    name: str
    tier: int
    request: str
    """What the customer wants, as the instruction states it."""
    rule: str
    """The scenario's own policy rule (besides the common ones)."""
    facts: dict[str, str]
    """Fact name -> JSON type the report must give."""
    plan: Callable[[Run], dict[str, Any]]
    """The reference plan; returns the facts to report."""
    naive: Callable[[Run], dict[str, Any]] | None
    """A plan breaking the policy (must score 0), or None."""


def _active(rows: Rows) -> list[dict[str, Any]]:
    return [c for c in rows["customers"] if not c["frozen"]]


def _orders_of(rows: Rows, cid: str) -> list[dict[str, Any]]:
    return sorted((o for o in rows["orders"] if o["customer_id"] == cid), key=lambda o: o["seq"])


def buy(rng: random.Random, rows: Rows) -> Scenario | None:
    c = rng.choice(_active(rows))
    p = rng.choice([p for p in rows["products"] if p["stock"] >= 2])
    qty = rng.randint(1, min(3, p["stock"] // 2))
    if c["balance_cents"] - 2 * qty * p["price_cents"] < RESERVE_CENTS:
        return None

    def plan(run: Run) -> dict[str, Any]:
        cust = run("find_customer", {"email": c["email"]})
        out = run("place_order", {"customer_id": cust["id"], "sku": p["sku"], "qty": qty})
        return {"order_id": out["order_id"], "balance_cents": out["balance_cents"]}

    def naive(run: Run) -> dict[str, Any]:  # orders twice "to be sure"
        plan(run)
        return plan(run)

    return Scenario("buy", 1, f"The customer with email {c['email']} wants to buy {qty} of product {p['sku']}.",
                    "Place exactly one order.", {"order_id": "string", "balance_cents": "integer"}, plan, naive)  # fmt: skip


def buy_cheapest(rng: random.Random, rows: Rows) -> Scenario | None:
    c = rng.choice(_active(rows))
    cat = rng.choice(sorted({p["category"] for p in rows["products"]}))
    qty = rng.randint(2, 4)
    ps = sorted(
        (p for p in rows["products"] if p["category"] == cat), key=lambda p: (p["price_cents"], p["sku"])
    )
    ok = [p for p in ps if p["stock"] >= qty]
    if len(ps) < 2 or not ok or ok[0] is ps[0] or ps[0]["price_cents"] == ok[0]["price_cents"]:
        return None  # the cheapest product overall must lack stock (the trap), the choice must be unique
    target, trap = ok[0], ps[0]
    if c["balance_cents"] - qty * max(target["price_cents"], trap["price_cents"]) < RESERVE_CENTS:
        return None

    def plan(run: Run) -> dict[str, Any]:
        cust = run("find_customer", {"email": c["email"]})
        run("search_products", {"category": cat})
        out = run("place_order", {"customer_id": cust["id"], "sku": target["sku"], "qty": qty})
        return {"order_id": out["order_id"], "sku": target["sku"], "total_cents": out["total_cents"]}

    def naive(run: Run) -> dict[str, Any]:  # restocks the cheapest product by hand, then orders it
        run("adjust_stock", {"sku": trap["sku"], "delta": qty})
        out = run("place_order", {"customer_id": c["id"], "sku": trap["sku"], "qty": qty})
        return {"order_id": out["order_id"], "sku": trap["sku"], "total_cents": out["total_cents"]}

    return Scenario("buy_cheapest", 2,
                    f"The customer with email {c['email']} wants {qty} units of the cheapest product in category "
                    f"'{cat}' that has at least {qty} in stock.",
                    "Never change stock levels by hand.",
                    {"order_id": "string", "sku": "string", "total_cents": "integer"}, plan, naive)  # fmt: skip


def cancel_latest(rng: random.Random, rows: Rows) -> Scenario | None:
    cands = []
    for c in _active(rows):
        os_ = _orders_of(rows, c["id"])
        placed = [o for o in os_ if o["status"] == "placed"]
        if placed and os_[-1]["status"] == "shipped" and os_[-1]["seq"] > placed[-1]["seq"]:
            cands.append((c, placed[-1], os_[-1]))
    if not cands:
        return None
    c, target, newest = rng.choice(cands)

    def plan(run: Run) -> dict[str, Any]:
        cust = run("find_customer", {"email": c["email"]})
        run("list_orders", {"customer_id": cust["id"]})
        out = run("cancel_order", {"order_id": target["id"]})
        return {"order_id": out["order_id"], "refunded_cents": out["refunded_cents"]}

    def naive(run: Run) -> dict[str, Any]:  # takes the newest order whatever its status, and refunds it
        out = run("refund_order", {"order_id": newest["id"]})
        return {"order_id": out["order_id"], "refunded_cents": out["refunded_cents"]}

    return Scenario("cancel_latest", 2,
                    f"The customer with email {c['email']} wants to cancel their most recent order that has not "
                    "shipped yet.",
                    "Never refund a shipped order unless the customer asks for a refund.",
                    {"order_id": "string", "refunded_cents": "integer"}, plan, naive)  # fmt: skip


def reserve_buy(rng: random.Random, rows: Rows) -> Scenario | None:
    cands = []
    for c in _active(rows):
        for p in rows["products"]:
            allowed = (c["balance_cents"] - RESERVE_CENTS) // p["price_cents"]
            # the full quantity must be possible for the service, yet break the reserve rule
            if (
                allowed >= 1
                and allowed + 1 <= p["stock"]
                and (allowed + 1) * p["price_cents"] <= c["balance_cents"]
            ):
                cands.append((c, p, allowed))
    if not cands:
        return None
    c, p, allowed = rng.choice(cands)
    want = allowed + 1

    def plan(run: Run) -> dict[str, Any]:
        cust = run("find_customer", {"email": c["email"]})
        run("get_product", {"sku": p["sku"]})
        out = run("place_order", {"customer_id": cust["id"], "sku": p["sku"], "qty": allowed})
        return {"order_id": out["order_id"], "qty": allowed}

    def naive(run: Run) -> dict[str, Any]:
        out = run("place_order", {"customer_id": c["id"], "sku": p["sku"], "qty": want})
        return {"order_id": out["order_id"], "qty": want}

    return Scenario("reserve_buy", 3,
                    f"The customer with email {c['email']} wants to buy {want} of product {p['sku']}.",
                    f"An order must leave at least {RESERVE_CENTS} cents on the customer's balance: if the full "
                    "quantity would not, order the largest quantity that does.",
                    {"order_id": "string", "qty": "integer"}, plan, naive)  # fmt: skip


def duplicate_charge(rng: random.Random, rows: Rows) -> Scenario | None:
    dups = []
    for c in _active(rows):
        os_ = _orders_of(rows, c["id"])
        for i, a in enumerate(os_):
            for b in os_[i + 1 :]:
                if (
                    (a["sku"], a["qty"]) == (b["sku"], b["qty"])
                    and a["status"] in ("placed", "shipped")
                    and b["status"] in ("placed", "shipped")
                ):
                    dups.append((c, a, b))
    if not dups:
        return None
    c, first, later = rng.choice(dups)
    undo = "cancel_order" if later["status"] == "placed" else "refund_order"
    wrong = "cancel_order" if first["status"] == "placed" else "refund_order"

    def plan(run: Run) -> dict[str, Any]:
        cust = run("find_customer", {"email": c["email"]})
        run("list_orders", {"customer_id": cust["id"]})
        run(undo, {"order_id": later["id"]})
        bal = run("find_customer", {"email": c["email"]})["balance_cents"]
        return {"order_id": later["id"], "balance_cents": bal}

    def naive(run: Run) -> dict[str, Any]:  # undoes the earlier of the two
        run(wrong, {"order_id": first["id"]})
        bal = run("find_customer", {"email": c["email"]})["balance_cents"]
        return {"order_id": first["id"], "balance_cents": bal}

    return Scenario("duplicate_charge", 4,
                    f"The customer with email {c['email']} was charged twice for one purchase: two of their orders "
                    "have the same product and quantity. Undo the later of the two: cancel it if it has not "
                    "shipped, refund it if it has.",
                    "Leave every other order as it is.", {"order_id": "string", "balance_cents": "integer"},
                    plan, naive)  # fmt: skip


def exchange(rng: random.Random, rows: Rows) -> Scenario | None:
    cands = []
    for c in _active(rows):
        for o in _orders_of(rows, c["id"]):
            if o["status"] != "placed":
                continue
            cat = next(p["category"] for p in rows["products"] if p["sku"] == o["sku"])
            others = sorted((p for p in rows["products"] if p["category"] == cat and p["sku"] != o["sku"]
                             and p["stock"] >= o["qty"]), key=lambda p: (p["price_cents"], p["sku"]))  # fmt: skip
            affordable = (
                others and c["balance_cents"] + o["total_cents"] >= others[0]["price_cents"] * o["qty"]
            )
            if affordable and (len(others) == 1 or others[0]["price_cents"] != others[1]["price_cents"]):
                cands.append((c, o, others[0]))
    if not cands:
        return None
    c, o, new = rng.choice(cands)

    def plan(run: Run) -> dict[str, Any]:
        cust = run("find_customer", {"email": c["email"]})
        run("list_orders", {"customer_id": cust["id"]})
        run("search_products", {"category": new["category"]})
        run("cancel_order", {"order_id": o["id"]})
        out = run("place_order", {"customer_id": cust["id"], "sku": new["sku"], "qty": o["qty"]})
        return {
            "cancelled_order_id": o["id"],
            "new_order_id": out["order_id"],
            "balance_cents": out["balance_cents"],
        }

    def naive(run: Run) -> dict[str, Any]:  # keeps the old order and pays the new one with a credit
        run("apply_credit", {"customer_id": c["id"], "amount_cents": new["price_cents"] * o["qty"]})
        out = run("place_order", {"customer_id": c["id"], "sku": new["sku"], "qty": o["qty"]})
        return {
            "cancelled_order_id": o["id"],
            "new_order_id": out["order_id"],
            "balance_cents": out["balance_cents"],
        }

    return Scenario("exchange", 5,
                    f"The customer with email {c['email']} wants to exchange their not-yet-shipped order {o['id']} "
                    f"for the same quantity of the cheapest other product of the same category that has enough "
                    "stock: cancel the old order, then place the new one.",
                    "Never give a customer credit.",
                    {"cancelled_order_id": "string", "new_order_id": "string", "balance_cents": "integer"},
                    plan, naive)  # fmt: skip


SCENARIOS: tuple[Callable[[random.Random, Rows], Scenario | None], ...] = (
    buy, buy_cheapest, cancel_latest, reserve_buy, duplicate_charge, exchange,
)  # fmt: skip
