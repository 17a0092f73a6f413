"""What a spreadsheet task asks, and the truth of it, computed in Python (never read from a workbook).

A task's workbook has a ``Data`` sheet of orders (id, region, product, units,
price, discount, a messy e-mail address, an amount typed as text) and asks for
one or two *parts*: a formula column, a cleaned column, fixed totals, a summary
sheet. Each part names its *targets*: cells that must hold a formula (or, for
labels and headers, a value) and the value each must come out as. The same
layout is drawn again with fresh numbers and text (:data:`N_VARIANTS` input
variants the agent never sees); every target's value is computed here for the
given data and for each variant, so the judge can re-evaluate the agent's
formulas on data it never saw and compare with numbers no workbook cached.

Everything here is plain data and arithmetic; :mod:`.xlsx` turns it into
workbooks and ``payload/judge.py`` checks a candidate's workbook against it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

N_VARIANTS = 3
REGIONS = ("north", "south", "east", "west", "central")
PRODUCTS = ("bolt", "gear", "lamp", "pump", "valve", "wire")
FIRST = ("ann", "bob", "cleo", "dev", "eli", "fay", "gus", "hal", "ida", "jon", "kim", "lev")
DOMAINS = ("example.com", "mail.test", "corp.example", "shop.test")
INPUT_COLUMNS = ("id", "region", "product", "units", "price", "discount", "email", "amount_text")
COL = {name: "ABCDEFGH"[i] for i, name in enumerate(INPUT_COLUMNS)}
Value = int | float | str | None
Row = dict[str, Value]


@dataclass(frozen=True)
class Target:
    """One cell the checker reads: ``formula`` ones must hold a formula; each has a value per dataset."""

    sheet: str
    cell: str
    formula: bool
    values: tuple[Value, ...]  # index 0: the given data; 1..N_VARIANTS: the variants
    reference: Value  # what the gold workbook writes: a formula text, or the value itself

    @property
    def ref(self) -> str:
        return f"{self.sheet}!{self.cell}"


@dataclass(frozen=True)
class Part:
    """One instruction of a task, its targets, and what the initial workbook already holds for it."""

    kind: str
    text: str
    tier: int
    targets: tuple[Target, ...]
    initial: dict[str, dict[str, Value]] = field(default_factory=dict)  # sheet -> cell -> value (pre-filled)
    broken: tuple[tuple[str, tuple[Value, ...]], ...] = ()  # initial formula cells' values per dataset


# --------------------------------------------------------------------------- data


def _messy_email(rng: random.Random) -> tuple[str, str]:
    clean = f"{rng.choice(FIRST)}.{rng.choice(FIRST)}{rng.randint(1, 99)}@{rng.choice(DOMAINS)}"
    messy = "".join(c.upper() if rng.random() < 0.35 else c for c in clean)
    return " " * rng.randint(0, 3) + messy + " " * rng.randint(1, 3), clean


def _amount_text(rng: random.Random) -> tuple[str, float]:
    cents = rng.randint(5_00, 25_000_00)
    value = cents / 100
    dollar = "$" if rng.random() < 0.5 else ""
    return " " * rng.randint(0, 2) + f"{dollar}{value:,.2f}" + " " * rng.randint(0, 2), value


def make_rows(rng: random.Random, n: int) -> list[Row]:
    """n order rows; every region appears (so a summary's labels are the same in every variant)."""
    regions = [REGIONS[i % len(REGIONS)] for i in range(n)]
    rng.shuffle(regions)
    rows: list[Row] = []
    for i in range(n):
        email, _ = _messy_email(rng)
        amount, _ = _amount_text(rng)
        rows.append({
            "id": 1001 + i, "region": regions[i], "product": rng.choice(PRODUCTS),
            "units": rng.randint(1, 40), "price": rng.randint(200, 20000) / 100,
            "discount": rng.choice((0.0, 0.05, 0.1, 0.15, 0.2, 0.25)), "email": email, "amount_text": amount,
        })  # fmt: skip
    return rows


def clean_email(raw: Value) -> str:
    return str(raw).strip().lower()


def clean_amount(raw: Value) -> float:
    return float(str(raw).strip().replace("$", "").replace(",", ""))


def _num(row: Row, key: str) -> float:
    v = row[key]
    assert isinstance(v, int | float)
    return float(v)


# --------------------------------------------------------------------------- parts

Datasets = list[list[Row]]  # index 0: given; then the variants


def _rowcells(n: int) -> range:
    return range(2, n + 2)


REVENUE = {
    # name: (phrase, formula of row r, python of a row, tier)
    "gross": ("units × price", "=D{r}*E{r}", lambda w: _num(w, "units") * _num(w, "price"), 1),
    "net": ("units × price × (1 − discount)", "=D{r}*E{r}*(1-F{r})",
            lambda w: _num(w, "units") * _num(w, "price") * (1 - _num(w, "discount")), 1),
    "unit_net": ("the price after discount, price × (1 − discount)", "=E{r}*(1-F{r})",
                 lambda w: _num(w, "price") * (1 - _num(w, "discount")), 1),
}  # fmt: skip


def revenue_part(rng: random.Random, data: Datasets, fee: bool) -> Part:
    n = len(data[0])
    if fee:
        k, charge = rng.randint(5, 15), rng.choice((2.5, 4.0, 5.0, 7.5))
        phrase = f"units × price, less a handling fee of {charge} when fewer than {k} units were ordered"
        formula = f"=IF(D{{r}}<{k},D{{r}}*E{{r}}-{charge},D{{r}}*E{{r}})"

        def fn(w: Row) -> float:
            gross = _num(w, "units") * _num(w, "price")
            return gross - charge if _num(w, "units") < k else gross

        tier = 2
    else:
        name = rng.choice(sorted(REVENUE))
        phrase, formula, fn, tier = REVENUE[name]
    targets = [Target("Data", "J1", False, ("revenue",) * len(data), "revenue")]
    for i, r in enumerate(_rowcells(n)):
        targets.append(Target("Data", f"J{r}", True, tuple(fn(d[i]) for d in data), formula.format(r=r)))
    text = (f"In sheet Data, put the header `revenue` in J1 and, in J2:J{n + 1}, a formula for each order "
            f"computing {phrase} from that row's cells.")  # fmt: skip
    return Part("revenue", text, tier, tuple(targets))


def clean_email_part(data: Datasets) -> Part:
    n = len(data[0])
    targets = [Target("Data", "K1", False, ("email_clean",) * len(data), "email_clean")]
    for i, r in enumerate(_rowcells(n)):
        targets.append(Target("Data", f"K{r}", True, tuple(clean_email(d[i]["email"]) for d in data),
                              f"=LOWER(TRIM(G{r}))"))  # fmt: skip
    text = (f"The e-mail addresses in column G carry stray spaces and upper-case letters. Put the header "
            f"`email_clean` in K1 and, in K2:K{n + 1}, a formula giving each address without leading or "
            f"trailing spaces, in lower case.")  # fmt: skip
    return Part("clean_email", text, 1, tuple(targets))


def clean_amount_part(data: Datasets) -> Part:
    n = len(data[0])
    targets = [Target("Data", "L1", False, ("amount",) * len(data), "amount")]
    for i, r in enumerate(_rowcells(n)):
        formula = f'=VALUE(SUBSTITUTE(SUBSTITUTE(TRIM(H{r}),"$",""),",",""))'
        targets.append(Target("Data", f"L{r}", True, tuple(clean_amount(d[i]["amount_text"]) for d in data),
                              formula))  # fmt: skip
    text = (f"Column H holds amounts typed as text (spaces, an optional `$`, thousands separators). Put the "
            f"header `amount` in L1 and, in L2:L{n + 1}, a formula turning each into a number.")  # fmt: skip
    return Part("clean_amount", text, 2, tuple(targets))


STATS: dict[str, tuple[str, str, str]] = {
    # label: (function, column, python aggregate name)
    "total units": ("SUM", "units", "sum"),
    "orders": ("COUNT", "id", "count"),
    "mean price": ("AVERAGE", "price", "mean"),
    "largest discount": ("MAX", "discount", "max"),
    "smallest units": ("MIN", "units", "min"),
    "total price": ("SUM", "price", "sum"),
}
AGG: dict[str, Callable[[list[float]], float]] = {
    "SUM": sum, "COUNT": lambda xs: float(len(xs)), "AVERAGE": lambda xs: sum(xs) / len(xs), "MAX": max, "MIN": min,
}  # fmt: skip


def _stat(fn: str, col: str, rows: list[Row]) -> float:
    return AGG[fn]([_num(w, col) for w in rows])


def _bugs(fn: str, col: str, n: int) -> list[tuple[str, Callable[[list[Row]], float]]]:
    """Plausible wrong versions of ``fn(col)``: (formula, its value on a dataset)."""
    c = COL[col]
    other = "price" if col != "price" else "units"
    wrong_fn = {"SUM": "AVERAGE", "AVERAGE": "SUM", "MAX": "MIN", "MIN": "MAX", "COUNT": "SUM"}[fn]
    return [
        (f"={fn}(Data!{c}2:{c}{n})", lambda rows: _stat(fn, col, rows[:-1])),
        (f"={fn}(Data!{COL[other]}2:{COL[other]}{n + 1})", lambda rows: _stat(fn, other, rows)),
        (f"={wrong_fn}(Data!{c}2:{c}{n + 1})", lambda rows: _stat(wrong_fn, col, rows)),
    ]


def fix_totals_part(rng: random.Random, data: Datasets, n_bugs: int) -> Part | None:
    """A Totals sheet whose formulas should compute the labelled figures; ``n_bugs`` of them are wrong.

    None when no draw gives bugs that are wrong on every dataset (the caller draws again)."""
    n = len(data[0])
    labels = rng.sample(sorted(STATS), 4)
    broken_rows = set(rng.sample(range(4), n_bugs))
    initial: dict[str, Value] = {"A1": "figure", "B1": "value"}
    targets: list[Target] = []
    broken: list[tuple[str, tuple[Value, ...]]] = []
    for k, label in enumerate(labels):
        fn, col, _ = STATS[label]
        cell, c = f"B{k + 2}", COL[col]
        good = f"={fn}(Data!{c}2:{c}{n + 1})"
        values = tuple(_stat(fn, col, d) for d in data)
        initial[f"A{k + 2}"] = label
        initial[cell] = good
        if k in broken_rows:
            options = [(f, tuple(v(d) for d in data)) for f, v in _bugs(fn, col, n)]
            options = [(f, vs) for f, vs in options if all(abs(float(a) - float(b)) > 1e-6 * max(1.0, abs(float(b)))
                                                            for a, b in zip(vs, values, strict=True))]  # fmt: skip
            if not options:
                return None
            f, vs = rng.choice(options)
            initial[cell] = f
            broken.append((f"Totals!{cell}", vs))
        targets.append(Target("Totals", cell, True, values, good))
    text = (f"Sheet Totals lists figures of the orders in Data (labels in A2:A5, formulas in B2:B5); some of "
            f"the formulas are wrong. Fix them so each computes its label over all {n} order rows "
            "(`orders` counts them; `mean` is the arithmetic mean).")  # fmt: skip
    return Part("fix_totals", text, 1 + n_bugs, tuple(targets), {"Totals": initial}, tuple(broken))


def summary_part(data: Datasets, revenue: bool) -> Part:
    n = len(data[0])
    regions = sorted({str(w["region"]) for w in data[0]})
    heads = ["region", "units", "orders"] + (["revenue"] if revenue else [])
    targets = [Target("Summary", f"{'ABCD'[j]}1", False, (h,) * len(data), h) for j, h in enumerate(heads)]
    rng_ = f"Data!B2:B{n + 1}"
    for k, reg in enumerate(regions):
        r = k + 2
        targets.append(Target("Summary", f"A{r}", False, (reg,) * len(data), reg))
        sel = [[w for w in d if w["region"] == reg] for d in data]
        targets.append(Target("Summary", f"B{r}", True, tuple(sum(_num(w, "units") for w in s) for s in sel),
                              f"=SUMIF({rng_},A{r},Data!D2:D{n + 1})"))  # fmt: skip
        targets.append(Target("Summary", f"C{r}", True, tuple(float(len(s)) for s in sel),
                              f"=COUNTIF({rng_},A{r})"))  # fmt: skip
        if revenue:
            targets.append(Target("Summary", f"D{r}", True,
                                  tuple(sum(_num(w, "units") * _num(w, "price") for w in s) for s in sel),
                                  f"=SUMPRODUCT(({rng_}=A{r})*Data!D2:D{n + 1}*Data!E2:E{n + 1})"))  # fmt: skip
    extra = " and D (`revenue`: the total of units × price)" if revenue else ""
    text = (f"Add a sheet named Summary with the headers {', '.join(f'`{h}`' for h in heads)} in row 1 and, from "
            f"row 2, one row per region in alphabetical order: the region's name in column A, formulas in B "
            f"(total units of its orders), C (number of its orders){extra}.")  # fmt: skip
    return Part("summary", text, 2 + int(revenue), tuple(targets))


def draw_parts(rng: random.Random, data: Datasets, tier: int) -> list[Part]:
    """The parts of a task of ``tier`` (1: one easy part; 2: one harder part; 3: two parts or a hard one)."""
    for _ in range(50):
        if tier == 1:
            choice = rng.choice(("revenue", "clean_email"))
            parts: list[Part | None] = [
                revenue_part(rng, data, False) if choice == "revenue" else clean_email_part(data)
            ]
        elif tier == 2:
            choice = rng.choice(("fee", "clean_amount", "fix1", "summary"))
            parts = [{"fee": lambda: revenue_part(rng, data, True), "clean_amount": lambda: clean_amount_part(data),
                      "fix1": lambda: fix_totals_part(rng, data, 1),
                      "summary": lambda: summary_part(data, False)}[choice]()]  # fmt: skip
        else:
            choice = rng.choice(("fix2", "summary_rev", "pair"))
            if choice == "fix2":
                parts = [fix_totals_part(rng, data, 2)]
            elif choice == "summary_rev":
                parts = [summary_part(data, True)]
            else:
                parts = [revenue_part(rng, data, rng.random() < 0.5), clean_amount_part(data)]
        if all(p is not None for p in parts):
            return [p for p in parts if p is not None]
    raise RuntimeError(
        "no spreadsheet parts could be drawn"
    )  # unreachable in practice: bugs almost always differ


def data_sets(rng: random.Random, n: int) -> Datasets:
    """The given rows and :data:`N_VARIANTS` variants of the same shape."""
    return [make_rows(rng, n) for _ in range(1 + N_VARIANTS)]


def input_cells(rows: list[Row]) -> dict[str, Any]:
    """The Data sheet's input cells (header and rows) as cell -> value."""
    out: dict[str, Any] = {f"{COL[c]}1": c for c in INPUT_COLUMNS}
    for i, w in enumerate(rows):
        for c in INPUT_COLUMNS:
            out[f"{COL[c]}{i + 2}"] = w[c]
    return out
