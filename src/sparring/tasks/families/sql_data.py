"""Databases of the ``sql`` family: three-table schemas, their rows, a perturbed copy, SQLite bytes.

Every domain has the same shape under its own names, so one set of question
templates serves them all: a table of *people* (name, two categories), a table of
*items* (name, a category, a price with two decimals) and a table of *facts*
linking one person to one item (an integer amount, a status). People's names
repeat on purpose (results with duplicate rows are the norm, not the exception),
and prices have two decimals so sums of ``amount * price`` are exact in cents.

The perturbed copy keeps the schema and vocabulary but changes rows: some facts
change amount or status, some are dropped, some added; some people change
category; some prices change. A query that computes the answer gives the
perturbed answer there; one that hard-codes the given database's answer does not.
"""

from __future__ import annotations

import random
import sqlite3
from dataclasses import dataclass
from typing import Any

Row = dict[str, Any]


@dataclass(frozen=True)
class Domain:
    """One schema: table and column names, and the vocabulary of its category columns."""

    name: str
    people: str
    person: str
    pc1: str
    pc1_values: tuple[str, ...]
    pc2: str
    pc2_values: tuple[str, ...]
    items: str
    item: str
    ic: str
    ic_values: tuple[str, ...]
    inum: str
    facts: str
    fact: str
    pfk: str
    ifk: str
    fint: str
    fcat: str
    fcat_values: tuple[str, ...]


DOMAINS = (
    Domain("shop", "customers", "customer", "city", ("lyon", "porto", "graz", "turku", "split"),
           "tier", ("basic", "plus", "pro"), "products", "product", "category",
           ("toys", "books", "garden", "kitchen", "sports"), "price", "orders", "order", "customer_id",
           "product_id", "quantity", "status", ("placed", "shipped", "returned")),
    Domain("library", "members", "member", "branch", ("north", "south", "harbour", "old_town"),
           "plan", ("student", "adult", "senior"), "books", "book", "genre",
           ("crime", "poetry", "history", "science", "travel"), "fee", "loans", "loan", "member_id",
           "book_id", "days", "state", ("open", "returned", "lost")),
    Domain("clinic", "patients", "patient", "district", ("east", "west", "centre", "hills", "coast"),
           "insurer", ("medi", "sana", "vita"), "treatments", "treatment", "kind",
           ("dental", "physio", "lab", "imaging"), "cost", "visits", "visit", "patient_id",
           "treatment_id", "minutes", "outcome", ("done", "cancelled", "no_show")),
    Domain("fleet", "drivers", "driver", "depot", ("alpha", "bravo", "delta", "echo"),
           "licence", ("b", "c", "d"), "vehicles", "vehicle", "make",
           ("volvo", "scania", "iveco", "daf"), "rate", "trips", "trip", "driver_id",
           "vehicle_id", "stops", "result", ("done", "late", "aborted")),
    Domain("school", "students", "student", "house", ("oak", "elm", "ash", "yew", "fir"),
           "cohort", ("first", "second", "third"), "courses", "course", "subject",
           ("maths", "art", "music", "biology", "french"), "credit", "enrolments", "enrolment", "student_id",
           "course_id", "grade", "standing", ("active", "passed", "dropped")),
    Domain("hotel", "guests", "guest", "country", ("fr", "de", "it", "es", "pt"),
           "loyalty", ("none", "silver", "gold"), "rooms", "room", "aspect", ("sea", "garden", "city", "court"),
           "rate", "stays", "stay", "guest_id", "room_id", "nights", "status", ("booked", "checked_out", "cancelled")),
)  # fmt: skip

FIRST_NAMES = ("ada", "bo", "cleo", "dan", "eve", "finn", "gus", "hana", "ivo", "jun", "kai", "lea",
               "mo", "nia", "oto", "pia")  # fmt: skip
ITEM_WORDS = ("amber", "birch", "cobalt", "dune", "ember", "fjord", "glade", "harbor", "iris", "jade",
              "kelp", "lumen", "moss", "nova", "onyx", "pearl", "quartz", "reef", "sage", "tide")  # fmt: skip


@dataclass(frozen=True)
class Database:
    """A database's rows per table (people, items, facts), each row a dict keyed by column name."""

    people: list[Row]
    items: list[Row]
    facts: list[Row]


def make_database(d: Domain, rng: random.Random, big: bool) -> Database:
    """Fresh rows of domain ``d``; ``big`` makes a larger fact table (a harder tier)."""
    n_people = rng.randint(14, 30)
    n_items = rng.randint(8, 16)
    n_facts = rng.randint(260, 420) if big else rng.randint(60, 140)
    people = [{"id": i + 1, "name": rng.choice(FIRST_NAMES), d.pc1: rng.choice(d.pc1_values),
               d.pc2: rng.choice(d.pc2_values)} for i in range(n_people)]  # fmt: skip
    words = rng.sample(ITEM_WORDS, n_items)
    items = [{"id": i + 1, "name": words[i], d.ic: rng.choice(d.ic_values),
              d.inum: rng.randint(100, 20000) / 100} for i in range(n_items)]  # fmt: skip
    facts = [_fact(d, rng, i + 1, n_people, n_items) for i in range(n_facts)]
    return Database(people, items, facts)


def _fact(d: Domain, rng: random.Random, fid: int, n_people: int, n_items: int) -> Row:
    return {"id": fid, d.pfk: rng.randint(1, n_people), d.ifk: rng.randint(1, n_items),
            d.fint: rng.randint(1, 9), d.fcat: rng.choice(d.fcat_values)}  # fmt: skip


def perturb(d: Domain, db: Database, rng: random.Random) -> Database:
    """A copy with the same schema and vocabulary and changed rows (see the module docstring)."""
    people = [dict(p) for p in db.people]
    for p in people:
        if rng.random() < 0.25:
            p[d.pc2] = rng.choice(d.pc2_values)
        if rng.random() < 0.15:
            p[d.pc1] = rng.choice(d.pc1_values)
    items = [dict(i) for i in db.items]
    for i in items:
        if rng.random() < 0.35:
            i[d.inum] = rng.randint(100, 20000) / 100
    facts = []
    for f in db.facts:
        if rng.random() < 0.1:
            continue
        g = dict(f)
        if rng.random() < 0.3:
            g[d.fint] = rng.randint(1, 9)
        if rng.random() < 0.2:
            g[d.fcat] = rng.choice(d.fcat_values)
        facts.append(g)
    next_id = max(f["id"] for f in db.facts) + 1
    for k in range(max(3, len(db.facts) // 7)):
        facts.append(_fact(d, rng, next_id + k, len(people), len(items)))
    return Database(people, items, facts)


def schema_sql(d: Domain) -> list[str]:
    """CREATE TABLE statements of domain ``d``."""
    return [
        f"CREATE TABLE {d.people} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, {d.pc1} TEXT NOT NULL, "
        f"{d.pc2} TEXT NOT NULL)",
        f"CREATE TABLE {d.items} (id INTEGER PRIMARY KEY, name TEXT NOT NULL, {d.ic} TEXT NOT NULL, "
        f"{d.inum} REAL NOT NULL)",
        f"CREATE TABLE {d.facts} (id INTEGER PRIMARY KEY, {d.pfk} INTEGER NOT NULL REFERENCES {d.people}(id), "
        f"{d.ifk} INTEGER NOT NULL REFERENCES {d.items}(id), {d.fint} INTEGER NOT NULL, {d.fcat} TEXT NOT NULL)",
    ]


def connect(d: Domain, db: Database) -> sqlite3.Connection:
    """An in-memory SQLite database holding ``db``."""
    con = sqlite3.connect(":memory:")
    for stmt in schema_sql(d):
        con.execute(stmt)
    for table, rows in ((d.people, db.people), (d.items, db.items), (d.facts, db.facts)):
        cols = list(rows[0])
        con.executemany(
            f"INSERT INTO {table} ({', '.join(cols)}) VALUES ({', '.join('?' for _ in cols)})",
            [tuple(r[c] for c in cols) for r in rows],
        )
    con.commit()
    return con


def database_bytes(d: Domain, db: Database) -> bytes:
    """The database as a SQLite file (same rows, same SQLite: same bytes)."""
    con = connect(d, db)
    try:
        con.execute("VACUUM")
        return bytes(con.serialize())
    finally:
        con.close()


def schema_text(d: Domain) -> str:
    """The schema as the agent reads it in the workspace README."""
    return ";\n".join(schema_sql(d)) + ";\n"
