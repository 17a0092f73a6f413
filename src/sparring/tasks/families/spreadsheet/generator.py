"""The ``spreadsheet`` family: add or fix formulas, clean data, build a summary sheet in ``book.xlsx``.

Task ``index`` of ``seed`` draws a tier (``1 + index % 3``: balanced), a number
of order rows, the given data and :data:`~.model.N_VARIANTS` unseen variants,
and the parts of its instruction (:mod:`.model`). The generator writes:

* ``workspace/book.xlsx`` (the initial workbook) and ``workspace/.tools/sheet.py``
  (the server of the task's ``sheet_list`` / ``sheet_read`` / ``sheet_write`` tools);
* ``solution/book.xlsx``, the gold workbook: formulas without cached values;
* ``hidden/test_workbook.py`` (``payload/judge.py`` with the task's constants):
  the expected values come from Python, for the given data and every variant;
* ``hidden/.admission/hacks/*``: the family's hack classes, each must score 0:
  ``blank`` (the answer cells left empty), ``hardcoded`` (the right values typed
  in), ``constant_formulas`` (``=<value>``: formulas, but workbook-specific),
  ``visible_example`` (the instruction's example value everywhere),
  ``edited_inputs`` (the gold answer with an input cell changed).

A task whose unmodified workbook would pass is never written (:func:`initial_passes`).
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.tasks.environment import pinned_requirements
from sparring.tasks.families.spreadsheet import model, xlsx
from sparring.tasks.loader import Task, write_generated
from sparring.tasks.spec import CustomTool, Environment, JudgeSpec, Limits, Provenance, TaskSpec

PAYLOAD = Path(__file__).with_name("payload")
"""What runs inside sandboxes (the checker, the tool server): shipped as text, never imported here."""
FAMILY = "spreadsheet"
VERSION = "1"
GENERATOR = f"{FAMILY}/{VERSION}"
BOOK = "book.xlsx"
TEST_FILE = "test_workbook.py"
TESTS = ("test_answer_cells_hold_formulas", "test_input_cells_unchanged", "test_values_on_given_data",
         *(f"test_values_on_unseen_variant_{i}" for i in range(1, model.N_VARIANTS + 1)))  # fmt: skip
ROWS = {1: (8, 12), 2: (10, 18), 3: (16, 26)}
HACKS = ("blank", "hardcoded", "constant_formulas", "visible_example", "edited_inputs")
_SHEET = {"sheet": {"type": "string", "description": "sheet name, e.g. Data"}}
TOOLS = [
    CustomTool(name="sheet_list", description="List the sheets of book.xlsx and their used ranges.",
               command="python .tools/sheet.py"),
    CustomTool(name="sheet_read", description="Read cells of a sheet of book.xlsx (formulas shown as text).",
               parameters={"type": "object", "properties": {**_SHEET, "range": {
                   "type": "string", "description": "A1-style range, e.g. A1:H12; empty for the whole sheet"}},
                   "required": ["sheet"]}, command="python .tools/sheet.py"),
    CustomTool(name="sheet_write", description="Write cells of book.xlsx: a value, or a formula starting "
               "with '='. The sheet is created if missing.", parameters={"type": "object", "properties": {
                   **_SHEET, "cells": {"type": "object", "description": "cell -> value or formula, e.g. "
                                       '{"J2": "=D2*E2"}'}}, "required": ["sheet", "cells"]},
               command="python .tools/sheet.py"),
]  # fmt: skip


@dataclass(frozen=True)
class Drawn:
    """One task's content before it is written."""

    tier: int
    data: model.Datasets
    parts: list[model.Part]

    @property
    def targets(self) -> list[model.Target]:
        return [t for p in self.parts for t in p.targets]

    def initial(self) -> dict[str, dict[str, Any]]:
        sheets: dict[str, dict[str, Any]] = {"Data": model.input_cells(self.data[0])}
        for p in self.parts:
            for sheet, cells in p.initial.items():
                sheets.setdefault(sheet, {}).update(cells)
        return sheets

    def with_targets(self, value_of: Any) -> dict[str, dict[str, Any]]:
        """The initial sheets with each target set to ``value_of(target)`` (None leaves it empty)."""
        sheets = self.initial()
        for t in self.targets:
            sheets.setdefault(t.sheet, {})
            v = value_of(t)
            if v is None:
                sheets[t.sheet].pop(t.cell, None)
            else:
                sheets[t.sheet][t.cell] = v
        return sheets


def draw(index: int, seed: int) -> Drawn:
    rng = random.Random(zlib.crc32(f"{GENERATOR}:{seed}:{index}".encode()))
    tier = 1 + index % 3
    n = rng.randint(*ROWS[tier])
    data = model.data_sets(rng, n)
    return Drawn(tier, data, model.draw_parts(rng, data, tier))


def initial_passes(d: Drawn) -> bool:
    """Whether the unmodified workbook would pass: every formula target already a formula computing its
    value on every dataset (only pre-filled cells can; a broken one never does)."""
    initial = d.initial()
    broken = {ref for p in d.parts for ref, _ in p.broken}
    for t in d.targets:
        have = initial.get(t.sheet, {}).get(t.cell)
        if t.formula and (not isinstance(have, str) or not have.startswith("=") or t.ref in broken):
            return False
        if not t.formula and have != t.values[0]:
            return False
    return True


def _fmt(v: model.Value) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def instruction(d: Drawn) -> tuple[str, str]:
    example = next(t for t in d.targets if t.formula)
    head = (f"{BOOK} holds a sheet Data of {len(d.data[0])} orders (A id, B region, C product, D units, E price, "
            "F discount, G email, H amount_text). ")  # fmt: skip
    body = " ".join(p.text for p in d.parts)
    tail = (" Use formulas, not typed values: the workbook is recalculated, and also evaluated on other order "
            f"rows of the same shape. Leave the Data columns A-H unchanged. For example, {example.ref} comes out "
            f"as {_fmt(example.values[0])} on the given rows. Tools sheet_list, sheet_read and sheet_write edit "
            "the workbook; then submit.")  # fmt: skip
    criteria = ("Each answer cell named in the instruction holds a formula (headers and labels: the text asked "
                "for) whose value, recalculated by LibreOffice, matches the expected figure on the given rows "
                f"and on {model.N_VARIANTS} unseen variants of them; Data!A1:H{len(d.data[0]) + 1} is unchanged.")  # fmt: skip
    return head + body + tail, criteria


def hidden_test(d: Drawn) -> str:
    spec = {"book": BOOK, "targets": [[t.sheet, t.cell, t.formula] for t in d.targets],
            "inputs": [model.input_cells(rows) for rows in d.data]}  # fmt: skip
    text = (PAYLOAD / "judge.py").read_text()
    lines = []
    for line in text.splitlines():
        if line.endswith("# @@SPEC@@"):
            line = f"SPEC = {spec!r}"
        elif "# @@EXPECTED_" in line:
            i = int(line.split("# @@EXPECTED_")[1].rstrip("@"))
            line = f"EXPECTED_{i} = {[t.values[i] for t in d.targets]!r}"  # a plain constant: the probe withholds it
        lines.append(line)
    return "\n".join(lines) + "\n"


def hack_books(d: Drawn) -> dict[str, bytes]:
    """The family's hack classes as whole workbooks (each must score 0)."""
    example = next(t for t in d.targets if t.formula).values[0]
    gold = d.with_targets(lambda t: t.reference)
    edited = {s: dict(c) for s, c in gold.items()}
    units = edited["Data"]["D2"]
    edited["Data"]["D2"] = (units if isinstance(units, int) else 0) + 1
    books = {
        "blank": d.with_targets(lambda t: None if t.formula else t.reference),
        "hardcoded": d.with_targets(lambda t: t.values[0]),
        "constant_formulas": d.with_targets(
            lambda t: f"={t.values[0]!r}".replace("'", '"') if t.formula else t.reference
        ),
        "visible_example": d.with_targets(
            lambda t: f"={example!r}".replace("'", '"') if t.formula else t.reference
        ),
        "edited_inputs": edited,
    }
    return {name: xlsx.build(sheets) for name, sheets in books.items()}


def spreadsheet_task(
    index: int, seed: int
) -> tuple[TaskSpec, dict[str, str | bytes], dict[str, str | bytes], dict[str, str | bytes]]:
    """(spec, workspace, hidden, solution) of task ``index`` of ``seed``."""
    d = draw(index, seed)
    if initial_passes(d):  # never by construction; a guard against a future part that pre-fills its answer
        raise RuntimeError(f"spreadsheet task {index} of seed {seed}: the unmodified workbook would pass")
    text, criteria = instruction(d)
    kinds = sorted({p.kind for p in d.parts})
    n = len(d.data[0])
    spec = TaskSpec.model_validate({
        "id": f"spreadsheet-s{seed}-{index:04d}-{'-'.join(k.replace('_', '') for k in kinds)}",
        "family": FAMILY, "instruction": text, "success_criteria": criteria,
        "tools": ["bash", "read_file", "sheet_list", "sheet_read", "sheet_write", "submit"],
        "custom_tools": TOOLS,
        "limits": Limits(max_steps=24, wall_s=600.0, exec_timeout_s=60.0, memory_mb=1536, pids=256, disk_mb=64),
        "judge": JudgeSpec(hidden_tests=[f"{TEST_FILE}::{t}" for t in TESTS], weights={"all_pass": 1.0},
                           timeout_s=180.0, allow_binary_modules=[BOOK]),
        "difficulty": d.tier + int(n >= 20),
        "tags": [FAMILY, f"tier:{d.tier}", *(f"part:{k}" for k in kinds)],
        "provenance": Provenance(generator=GENERATOR, seed=seed, source=f"index {index}"),
        "environment": Environment(requirements=pinned_requirements(("pytest", "openpyxl"))),
    })  # fmt: skip
    workspace: dict[str, str | bytes] = {
        BOOK: xlsx.build(d.initial()),
        ".tools/sheet.py": (PAYLOAD / "tool.py").read_text(),
    }
    hidden: dict[str, str | bytes] = {TEST_FILE: hidden_test(d)}
    for name, book in hack_books(d).items():
        hidden[f".admission/hacks/{name}/{BOOK}"] = book
    solution: dict[str, str | bytes] = {BOOK: xlsx.build(d.with_targets(lambda t: t.reference))}
    return spec, workspace, hidden, solution


@dataclass(frozen=True)
class SpreadsheetGenerator:
    """Generates spreadsheet tasks; the same (n, seed) writes the same bytes. Needs openpyxl; judging needs
    LibreOffice (a one-line ConfigError names the package when either is missing)."""

    name: str = FAMILY
    version: str = VERSION

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        xlsx.require_openpyxl()
        xlsx.require_libreoffice()
        return write_generated(spreadsheet_task, n, seed, out)
