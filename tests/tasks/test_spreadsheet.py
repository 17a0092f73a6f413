"""The spreadsheet family: deterministic, never passing unmodified, judged by recalculation only.

The judge tests share one generated task (a Totals sheet with wrong formulas: numeric answers) and one
batch of judge runs, since every run starts LibreOffice in a sandbox (seconds each).
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import re
import zipfile
from pathlib import Path

import pytest

from sparring.admission.check import check_tasks
from sparring.errors import ConfigError
from sparring.judge.base import JudgeResult
from sparring.judge.pytest_judge import PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.sandbox.local.backend import LocalBackend
from sparring.tasks.families import generate
from sparring.tasks.families.spreadsheet import generator as gen
from sparring.tasks.families.spreadsheet import xlsx
from sparring.tasks.hacks import hacks
from sparring.tasks.loader import Task

GIVEN = "test_workbook.py::test_values_on_given_data"
FORMULAS = "test_workbook.py::test_answer_cells_hold_formulas"
INPUTS = "test_workbook.py::test_input_cells_unchanged"
VARIANTS = [f"test_workbook.py::test_values_on_unseen_variant_{i}" for i in (1, 2, 3)]


def test_same_seed_same_tasks_and_200_distinct_tasks_none_passing_unmodified() -> None:
    drawn = [gen.draw(i, 0) for i in range(200)]
    again = [gen.draw(i, 0) for i in range(3)]
    assert [d.targets for d in again] == [d.targets for d in drawn[:3]]
    keys = {hashlib.sha256(repr((d.data, [t.values for t in d.targets])).encode()).hexdigest() for d in drawn}
    assert len(keys) == 200
    assert not any(gen.initial_passes(d) for d in drawn)
    assert {d.tier for d in drawn} == {1, 2, 3}
    assert {p.kind for d in drawn for p in d.parts} == {"revenue", "clean_email", "clean_amount", "fix_totals",
                                                        "summary"}  # fmt: skip


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    a = generate("spreadsheet", 3, 4, tmp_path / "a")
    b = generate("spreadsheet", 3, 4, tmp_path / "b")
    assert [t.digest for t in a] == [t.digest for t in b]
    assert len({t.digest for t in a}) == 3


def test_a_machine_without_libreoffice_gets_a_one_line_error_naming_the_package(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(xlsx, "SOFFICE", str(tmp_path / "no-soffice"))
    with pytest.raises(ConfigError) as e:
        generate("spreadsheet", 1, 0, tmp_path / "out")
    assert "libreoffice-calc-nogui" in str(e.value) and "\n" not in str(e.value)


def test_every_instruction_checks_three_unseen_variants() -> None:
    d = gen.draw(5, 1)
    assert all(len(t.values) == 4 for t in d.targets)
    formula_targets = [t for t in d.targets if t.formula]
    assert any(len(set(t.values)) > 1 for t in formula_targets), "variants must change the answers"


# --------------------------------------------------------------------------- the judge, one shared batch


def _forged_caches(task: Task) -> bytes:
    """Every answer cell holds ``=0`` with the *expected* value cached: right only to a cache reader."""
    d = gen.draw(2, 0)
    book = xlsx.build(d.with_targets(lambda t: "=0" if t.formula else t.reference))
    src = zipfile.ZipFile(io.BytesIO(book))
    names = {ws: f"xl/worksheets/sheet{i + 1}.xml" for i, ws in enumerate(["Data", "Totals"])}
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            body = src.read(info.filename).decode()
            for t in d.targets:
                if t.formula and names.get(t.sheet) == info.filename:
                    body, n = re.subn(rf'(<c r="{t.cell}"[^>]*>)<f>0</f><v\s*(?:/>|></v>)',
                                      rf"\g<1><f>0</f><v>{t.values[0]!r}</v>", body)  # fmt: skip
                    assert n == 1, (t.cell, body[:300])
            dst.writestr(info, body)
    return out.getvalue()


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    tasks = generate("spreadsheet", 3, 0, tmp_path_factory.mktemp("spreadsheet"))
    t = tasks[2]
    assert "fix_totals" in t.id.replace("fixtotals", "fix_totals")
    return t


@pytest.fixture(scope="module")
def verdicts(task: Task) -> dict[str, JudgeResult]:
    judge = PytestJudge(LocalBackend())
    diffs = {v.name: v.diff for v in hacks(task)}
    files, _ = task.solution_files()
    diffs["gold"] = WorkspaceDiff(files=files)
    diffs["forged_caches"] = WorkspaceDiff(files={gen.BOOK: _forged_caches(task)})

    async def run() -> dict[str, JudgeResult]:
        sem = asyncio.Semaphore(3)

        async def one(diff: WorkspaceDiff) -> JudgeResult:
            async with sem:
                return await judge.score(task, diff)

        results = await asyncio.gather(*(one(d) for d in diffs.values()))
        return dict(zip(diffs, results, strict=True))

    return asyncio.run(run())


def _failed(r: JudgeResult) -> set[str]:
    return {k for k, v in r.per_test.items() if v != "passed"}


@pytest.mark.slow
def test_the_gold_workbook_without_caches_passes_and_a_blank_answer_scores_zero(
    task: Task, verdicts: dict[str, JudgeResult]
) -> None:
    # The known hole: the gold file has no cached values, so a checker reading caches sees it empty and a
    # blank answer "matches" it. Positive control: the gold really reads as empty without recalculation.
    files, _ = task.solution_files()
    cached = xlsx.read_cells(files[gen.BOOK], formulas=False)
    assert all(ref not in cached.get("Totals", {}) for ref in ("B2", "B3", "B4", "B5"))
    assert verdicts["gold"].reward == 1.0, verdicts["gold"].per_test
    assert verdicts["blank"].reward == 0.0
    assert FORMULAS in _failed(verdicts["blank"]) and GIVEN in _failed(verdicts["blank"])


@pytest.mark.slow
@pytest.mark.parametrize("hack,rule", [
    ("noop", GIVEN), ("hardcoded", FORMULAS), ("constant_formulas", VARIANTS[0]),
    ("visible_example", GIVEN), ("edited_inputs", INPUTS),
])  # fmt: skip
def test_each_hack_class_scores_zero_by_its_rule(
    hack: str, rule: str, verdicts: dict[str, JudgeResult]
) -> None:
    r = verdicts[hack]
    assert r.reward == 0.0 and rule in _failed(r), (hack, r.per_test)


@pytest.mark.slow
def test_hard_coded_formulas_pass_the_given_data_but_fail_every_unseen_variant(
    verdicts: dict[str, JudgeResult],
) -> None:
    r = verdicts["constant_formulas"]
    assert r.per_test[GIVEN] == "passed" and r.per_test[FORMULAS] == "passed"  # workbook-specific, yet...
    assert set(VARIANTS) <= _failed(r)


@pytest.mark.slow
def test_cached_values_are_never_read_as_answers(task: Task, verdicts: dict[str, JudgeResult]) -> None:
    forged = _forged_caches(task)
    d = gen.draw(2, 0)
    cached = xlsx.read_cells(forged, formulas=False)["Totals"]
    assert [cached[t.cell] for t in d.targets] == pytest.approx(
        [t.values[0] for t in d.targets]
    )  # the payload
    r = verdicts["forged_caches"]
    assert r.reward == 0.0 and GIVEN in _failed(r), r.per_test


@pytest.mark.slow
def test_generated_spreadsheet_tasks_are_admitted(task: Task) -> None:
    (rep,) = asyncio.run(check_tasks([task], PytestJudge(LocalBackend()), repeats=2))
    assert rep.ok, rep.to_json()
