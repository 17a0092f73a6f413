"""The ``data-analysis`` family: a generated CSV dataset and a question with a verified answer.

Each task draws a schema (sales, sensors, students, shipping), fresh numbers
from its seed, and a question template (count, sum, mean, median, sample
standard deviation, share above a threshold, correlation, best group by mean,
spread of group means) with a filter. The answer is computed by the reference
script (``solution/analysis.py``, plain ``csv`` + ``statistics``), which the
generator itself runs on the generated data, so the truth the hidden test holds
and the reference solution are one computation.

The agent writes its answer to ``answer.txt``; the hidden test accepts a
number within the stated tolerance (``max(1e-3, 1e-6 * |truth|)``) or the
exact category name (case-insensitive). The family ships hacks that must score
zero (the statistic without the filter, ``0``, the wrong group) and valid
alternative answers that must pass (full precision, rounding, padding).

Difficulty tiers come from the generator's parameters: the question template's
tier, plus one for missing cells, plus one for large datasets.

**Parquet**: where pyarrow is installed (``pip install 'sparring[parquet]'``),
about a quarter of the tasks (a separate draw per seed and index, so the CSV
tasks of a seed keep their bytes) ship the same kind of dataset as
``data/<name>.parquet`` instead, with typed columns (integers, floats, strings,
nulls for missing cells). Their pinned environment adds ``pyarrow``, so the
agent's sandbox and the judge's can read it, and the reference reads it with
``pyarrow.parquet``. The generator runs that reference on the Parquet bytes and
checks that it finds the truth computed from the same values; an unscored
hidden test runs it again inside the pinned environment on every judge run, so
admission (rule ``regression_kept``) proves the environment can read the data.
Without pyarrow every task is CSV: the same seed gives the same tasks on the
same installation (the pins are part of every task anyway).
"""

from __future__ import annotations

import csv
import hashlib
import importlib.util
import io
import math
import random
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError
from sparring.tasks.environment import pinned_requirements
from sparring.tasks.families.drafting import Drafted, check_count, draw_and_write
from sparring.tasks.loader import Task
from sparring.tasks.spec import Environment, JudgeSpec, Limits, Provenance, TaskSpec

FAMILY = "data-analysis"
VERSION = "1"
GENERATOR = f"{FAMILY}/{VERSION}"
MAX_N = 100_000
PARQUET_SHARE = 0.25


@dataclass(frozen=True)
class Schema:
    name: str
    what: str
    cats: tuple[tuple[str, tuple[str, ...]], ...]
    nums: tuple[tuple[str, float, float, int], ...]  # name, mean, spread, decimals (0 = integer)


SCHEMAS = (
    Schema(
        "sales",
        "orders of a shop",
        (("region", ("north", "south", "east", "west", "central")), ("channel", ("web", "store", "phone"))),
        (("units", 12, 8, 0), ("unit_price", 40.0, 25.0, 2), ("discount_pct", 8.0, 6.0, 1)),
    ),
    Schema(
        "sensors",
        "readings of environmental sensors",
        (("site", ("alpha", "bravo", "charlie", "delta")), ("sensor", ("s1", "s2", "s3", "s4", "s5"))),
        (("temperature", 18.0, 7.0, 2), ("humidity", 55.0, 15.0, 1), ("battery_mv", 3300, 250, 0)),
    ),
    Schema(
        "students",
        "exam results of students",
        (
            ("school", ("oak", "pine", "maple", "birch", "cedar", "elm")),
            ("track", ("science", "arts", "trade")),
        ),
        (("score", 68.0, 14.0, 1), ("study_hours", 9.0, 4.0, 1), ("absences", 4, 3, 0)),
    ),
    Schema(
        "shipping",
        "parcels of a carrier",
        (("carrier", ("fastco", "shipit", "parcelo")), ("zone", ("a", "b", "c", "d"))),
        (("weight_kg", 4.0, 2.5, 3), ("distance_km", 320.0, 180.0, 1), ("days", 3, 2, 0)),
    ),
)

# Question templates: (name, tier). Each is rendered by _question below.
TEMPLATES = (
    ("count", 1),
    ("sum", 2),
    ("mean", 2),
    ("share_above", 2),
    ("median", 3),
    ("stdev", 3),
    ("best_group", 3),
    ("corr", 4),
    ("mean_two_filters", 4),
    ("group_spread", 5),
)


def derive_seed(seed: int, *parts: object) -> int:
    text = ":".join([GENERATOR, str(seed), *map(str, parts)])
    return int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)


# --------------------------------------------------------------------------- data


def make_rows(schema: Schema, rng: random.Random, n: int, missing: float) -> list[dict[str, str]]:
    """n rows as CSV strings; numeric cells are blank with probability ``missing``.

    Groups of the first category differ for real: each shifts the numeric means
    and couples the second numeric column to the first with its own slope.
    """
    (c1, v1s), _ = schema.cats[0], None
    shift = {v: rng.uniform(0.7, 1.3) for v in v1s}
    slope = {v: rng.uniform(-1.5, 1.5) for v in v1s}
    rows = []
    for i in range(n):
        row = {"id": str(i + 1)}
        for name, values in schema.cats:
            row[name] = rng.choice(values)
        g = row[c1]
        first = 0.0
        for k, (name, mean, spread, decimals) in enumerate(schema.nums):
            z = rng.gauss(0.0, 1.0)
            if k == 0:
                first = z
            elif k == 1:
                z = slope[g] * first + z * 0.6
            v = max(0.0, mean * shift[g] + spread * z)
            if rng.random() < missing:
                row[name] = ""
            elif decimals == 0:
                row[name] = str(int(round(v)))
            else:
                row[name] = f"{v:.{decimals}f}"
        rows.append(row)
    return rows


def to_csv(rows: list[dict[str, str]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def parquet_available() -> bool:
    return importlib.util.find_spec("pyarrow") is not None


def to_parquet(schema: Schema, rows: list[dict[str, str]]) -> bytes:
    """The rows as a Parquet file with typed columns (deterministic bytes for a given pyarrow)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, Any] = {"id": pa.array([int(r["id"]) for r in rows], pa.int64())}
    for name, _ in schema.cats:
        cols[name] = pa.array([r[name] for r in rows], pa.string())
    for name, _mean, _spread, decimals in schema.nums:
        conv, typ = (int, pa.int64()) if decimals == 0 else (float, pa.float64())
        cols[name] = pa.array([None if r[name] == "" else conv(r[name]) for r in rows], typ)
    buf = pa.BufferOutputStream()
    pq.write_table(pa.table(cols), buf, compression="none")
    return bytes(buf.getvalue().to_pybytes())


# --------------------------------------------------------------------------- questions and the reference script

_PRELUDE = '''"""Reference analysis: computes the answer from {path} and writes it to answer.txt."""
import csv
import statistics

with open("{path}", newline="") as f:
    rows = list(csv.DictReader(f))


def num(row, col):
    return float(row[col]) if row[col] != "" else None


def values(rs, col):
    return [v for v in (num(r, col) for r in rs) if v is not None]


'''

_PARQUET_PRELUDE = '''"""Reference analysis: computes the answer from {path} and writes it to answer.txt."""
import statistics

import pyarrow.parquet as pq

rows = pq.read_table("{path}").to_pylist()


def num(row, col):
    return float(row[col]) if row[col] is not None else None


def values(rs, col):
    return [v for v in (num(r, col) for r in rs) if v is not None]


'''


@dataclass(frozen=True)
class Question:
    text: str
    body: str  # script lines computing `answer` (and `unfiltered` for the hack)
    kind: str  # "number" or "label"
    tier: int


def _question(template: str, tier: int, schema: Schema, rng: random.Random) -> Question:
    (c1, v1s), (c2, v2s) = schema.cats
    nums = [n[0] for n in schema.nums]
    col, col2 = rng.sample(nums, 2)
    if template == "corr":
        col, col2 = nums[0], nums[1]  # the coupled pair
    v1, v2 = rng.choice(v1s), rng.choice(v2s)
    means = {n[0]: n[1] for n in schema.nums}
    thr = round(means[col] * rng.uniform(0.8, 1.2), 1)
    sel = f"sel = [r for r in rows if r[{c1!r}] == {v1!r}]\n"
    q = f"rows whose `{c1}` is {v1!r}"
    if template == "count":
        return Question(
            f"How many {q} are there?", sel + "answer = len(sel)\nunfiltered = len(rows)\n", "number", tier
        )
    if template in ("sum", "mean", "median", "stdev"):
        fn = {
            "sum": "sum",
            "mean": "statistics.fmean",
            "median": "statistics.median",
            "stdev": "statistics.stdev",
        }[template]
        word = {
            "sum": "the sum of",
            "mean": "the mean of",
            "median": "the median of",
            "stdev": "the sample standard deviation (n - 1 in the denominator) of",
        }[template]
        body = sel + f"answer = {fn}(values(sel, {col!r}))\nunfiltered = {fn}(values(rows, {col!r}))\n"
        return Question(f"What is {word} `{col}` over {q}?", body, "number", tier)
    if template == "share_above":
        body = (
            sel + f"vals = values(sel, {col!r})\nanswer = sum(1 for v in vals if v > {thr!r}) / len(vals)\n"
            f"allv = values(rows, {col!r})\nunfiltered = sum(1 for v in allv if v > {thr!r}) / len(allv)\n"
        )
        return Question(
            f"Among {q}, what fraction (between 0 and 1) of the non-empty `{col}` values are greater than {thr}?",
            body,
            "number",
            tier,
        )
    if template == "corr":
        body = (
            sel + f"pairs = [(num(r, {col!r}), num(r, {col2!r})) for r in sel]\n"
            "pairs = [p for p in pairs if None not in p]\n"
            "answer = statistics.correlation([a for a, _ in pairs], [b for _, b in pairs])\n"
            f"allp = [(num(r, {col!r}), num(r, {col2!r})) for r in rows]\nallp = [p for p in allp if None not in p]\n"
            "unfiltered = statistics.correlation([a for a, _ in allp], [b for _, b in allp])\n"
        )
        return Question(
            f"What is the Pearson correlation between `{col}` and `{col2}` over {q}, using only rows where "
            "both values are present?",
            body,
            "number",
            tier,
        )
    if template == "mean_two_filters":
        body = (
            f"sel = [r for r in rows if r[{c1!r}] == {v1!r} and r[{c2!r}] == {v2!r}]\n"
            f"answer = statistics.fmean(values(sel, {col!r}))\n"
            f"unfiltered = statistics.fmean(values([r for r in rows if r[{c1!r}] == {v1!r}], {col!r}))\n"
        )
        return Question(
            f"What is the mean of `{col}` over {q} and whose `{c2}` is {v2!r}?", body, "number", tier
        )
    groups = f"groups = {{g: statistics.fmean(values([r for r in rows if r[{c1!r}] == g], {col!r})) for g in {sorted(v1s)!r}}}\n"
    if template == "best_group":
        body = groups + "answer = max(groups, key=groups.get)\nunfiltered = min(groups, key=groups.get)\n"
        return Question(
            f"Which value of `{c1}` has the highest mean `{col}`? Answer with the value itself.",
            body,
            "label",
            tier,
        )
    if template == "group_spread":
        body = groups + "answer = max(groups.values()) - min(groups.values())\n"
        body += f"unfiltered = max(values(rows, {col!r})) - min(values(rows, {col!r}))\n"
        return Question(
            f"Group the rows by `{c1}` and take the mean of `{col}` in each group. What is the difference between "
            "the largest and the smallest group mean?",
            body,
            "number",
            tier,
        )
    raise ConfigError(f"unknown data-analysis template {template!r}")


def run_script(script: str, data_path: str, data: str) -> dict[str, Any]:
    """Run the reference script on the data in memory (trusted generator code); its namespace."""
    import builtins

    def fake_open(path: str, *a: Any, **k: Any) -> Any:
        if path == data_path:
            return io.StringIO(data)
        raise OSError(f"reference script may only read {data_path}")

    ns: dict[str, Any] = {"__builtins__": {**vars(builtins), "open": fake_open}, "__name__": "reference"}
    exec(compile(script, "<analysis.py>", "exec"), ns)  # generator-written code, never agent code
    return ns


def run_parquet_script(script: str, data_path: str, data: bytes) -> dict[str, Any]:
    """Run the Parquet reference on the Parquet bytes (written to a temporary file); its namespace."""
    with tempfile.TemporaryDirectory(prefix="sparring-da-") as tmp:
        f = Path(tmp) / data_path
        f.parent.mkdir(parents=True)
        f.write_bytes(data)
        ns: dict[str, Any] = {"__name__": "reference"}
        exec(compile(script.replace(f'"{data_path}"', repr(str(f))), "<analysis.py>", "exec"), ns)
    return ns


def fmt_number(x: float) -> str:
    if isinstance(x, int):
        return str(x)
    return f"{x:.6f}"


HIDDEN_TEST = '''"""Hidden check of the data-analysis answer (generated; the truth was computed from the dataset)."""
from pathlib import Path

KIND = {kind!r}
TRUTH = {truth!r}
TOLERANCE = {tol!r}


def _answer():
    for p in (Path("/workspace/answer.txt"), Path("answer.txt")):
        if p.is_file():
            return p.read_text().strip()
    raise AssertionError("answer.txt is missing")


def test_answer_is_one_value():
    text = _answer()
    assert text and len(text.split()) == 1, f"answer.txt must hold one value, got {{text[:80]!r}}"


def test_answer_is_correct():
    text = _answer()
    if KIND == "label":
        assert text.lower() == TRUTH.lower()
    else:
        assert abs(float(text) - TRUTH) <= TOLERANCE
'''

# Appended to the hidden test of Parquet tasks; not in judge.hidden_tests, so never scored. Admission's
# regression rule needs it to pass on the initial state and with the reference: the pinned environment
# (pyarrow included) reads the dataset and the reference finds the truth, inside the judge's sandbox.
HIDDEN_REFERENCE_TEST = """

DATA = {path!r}


def test_reference_reads_the_dataset_in_this_environment():
    import os
    import runpy
    import shutil
    import tempfile

    src = Path("/workspace") / DATA
    here = os.getcwd()
    tmp = tempfile.mkdtemp()
    try:
        (Path(tmp) / DATA).parent.mkdir(parents=True)
        shutil.copyfile(src, Path(tmp) / DATA)
        os.chdir(tmp)
        runpy.run_path(str(Path(__file__).with_name("reference_analysis.py")), run_name="reference")
        got = Path(tmp, "answer.txt").read_text().strip()
    finally:
        os.chdir(here)
        shutil.rmtree(tmp, ignore_errors=True)
    if KIND == "label":
        assert got.lower() == TRUTH.lower()
    else:
        assert abs(float(got) - TRUTH) <= TOLERANCE
"""

VISIBLE_TEST = '''"""Format check only: answer.txt exists and holds one value. The hidden test checks the value."""
from pathlib import Path


def test_answer_file_holds_one_value():
    text = Path("answer.txt").read_text().strip()
    assert text and len(text.split()) == 1
'''


def draft(
    seed: int, index: int, requirements: list[str], parquet_requirements: list[str] | None = None
) -> Drafted | None:
    """Task ``index`` of a seed, or None when the draw is degenerate (the caller draws again).

    With ``parquet_requirements`` (pins that include pyarrow), a share of the draws ship Parquet."""
    parquet = (
        parquet_requirements is not None
        and random.Random(derive_seed(seed, "format", index)).random() < PARQUET_SHARE
    )
    rng = random.Random(derive_seed(seed, "task", index))
    schema = rng.choice(SCHEMAS)
    template, tier = rng.choice(TEMPLATES)
    big = rng.random() < 0.3
    n = rng.randint(800, 3000) if big else rng.randint(60, 400)
    missing = rng.choice([0.0, 0.0, 0.03, 0.08])
    rows = make_rows(schema, rng, n, missing)
    data = to_csv(rows)
    q = _question(template, tier, schema, rng)
    path = f"data/{schema.name}.csv"
    script_core = _PRELUDE.format(path=path) + q.body
    try:
        ns = run_script(script_core, path, data)
    except (statistics.StatisticsError, ZeroDivisionError, ValueError):
        return None  # an empty group or constant column: draw again
    truth, hack = ns["answer"], ns["unfiltered"]
    data_file: str | bytes = data
    if parquet:
        path = f"data/{schema.name}.parquet"
        data_file = to_parquet(schema, rows)
        script_core = _PARQUET_PRELUDE.format(path=path) + q.body
        pns = run_parquet_script(script_core, path, data_file)
        if (pns["answer"], pns["unfiltered"]) != (truth, hack):
            raise AssertionError(f"data-analysis: the Parquet reference disagrees on {schema.name} #{index}")
    if q.kind == "number":
        if not isinstance(truth, (int, float)) or not math.isfinite(truth):
            return None
        tol = max(1e-3, 1e-6 * abs(truth))
        # The hacks must be clearly wrong: the unfiltered statistic and 0 both far from the truth.
        if abs(hack - truth) <= 100 * tol or abs(truth) <= 100 * tol:
            return None
        answer = fmt_number(truth)
        hacks = {"unfiltered": fmt_number(hack), "zero": "0"}
        alts = {
            "full_precision": repr(float(truth)),
            "rounded": f"{truth:.4f}",
            "padded": f"  {answer}  \n\n",
        }
        tol_text = f"within ±{tol:g} of the true value"
    else:
        if truth == hack:
            return None
        tol = 0.0
        answer = str(truth)
        hacks = {"wrong_group": str(hack)}
        alts = {"upper_case": answer.upper(), "padded": f"\n{answer}\n"}
        tol_text = "equal to the correct value of the column (case-insensitive)"
    difficulty = min(10, tier + (1 if missing else 0) + (1 if big else 0))
    script = (
        script_core
        + 'with open("answer.txt", "w") as f:\n    f.write('
        + ("f'{answer:.6f}\\n' if isinstance(answer, float) else f'{answer}\\n')\n")
    )
    cols = ["id", *(c for c, _ in schema.cats), *(c for c, *_ in schema.nums)]
    if parquet:
        miss_text = " Some numeric cells are null: ignore them." if missing else ""
        kind_text = "a Parquet file"
        tools_text = "Python with pyarrow (pyarrow.parquet.read_table) and the statistics module is available"
    else:
        miss_text = " Some numeric cells are empty: ignore them." if missing else ""
        kind_text = "a CSV file"
        tools_text = "Python with the csv and statistics modules is available; no other packages are needed"
    instruction = (
        f"The workspace holds {path}, {kind_text} of {n} {schema.what} (columns: {', '.join(cols)}).{miss_text} "
        f"Question: {q.text} Write the answer as a single value (a number, or the category name when the question "
        f"asks for one) to answer.txt in the workspace root. {tools_text}. Do not edit the tests, then submit."
    )
    success = (
        f"answer.txt in the workspace root holds one value {tol_text}, computed from {path}. The hidden tests "
        "test_answer.py::test_answer_is_one_value and test_answer.py::test_answer_is_correct check it."
    )
    hidden_ids = ["test_answer.py::test_answer_is_one_value", "test_answer.py::test_answer_is_correct"]
    spec = TaskSpec.model_validate(
        {
            "id": f"{FAMILY}-s{seed}-{index:05d}",
            "family": FAMILY,
            "instruction": instruction,
            "success_criteria": success,
            "limits": Limits(max_steps=20, memory_mb=512),
            "judge": JudgeSpec(hidden_tests=hidden_ids, weights={"all_pass": 1.0}),
            "difficulty": difficulty,
            "tags": [
                FAMILY,
                schema.name,
                template,
                *(["missing-values"] if missing else []),
                *(["parquet"] if parquet else []),
            ],
            "provenance": Provenance(
                generator=GENERATOR, seed=derive_seed(seed, "task", index), source=f"seed {seed} #{index}"
            ),
            "environment": Environment(
                requirements=parquet_requirements if parquet and parquet_requirements else requirements
            ),
        }
    )
    hidden: dict[str, str | bytes] = {
        "test_answer.py": HIDDEN_TEST.format(
            kind=q.kind, truth=truth if q.kind == "label" else float(truth), tol=tol
        )
    }
    if parquet:
        hidden["test_answer.py"] = str(hidden["test_answer.py"]) + HIDDEN_REFERENCE_TEST.format(path=path)
        hidden["reference_analysis.py"] = script
    for name, text in hacks.items():
        hidden[f".admission/hacks/{name}/answer.txt"] = text + "\n"
    for name, text in alts.items():
        hidden[f".admission/alternatives/{name}/answer.txt"] = text
    return Drafted(
        spec,
        {path: data_file, "tests/test_answer_format.py": VISIBLE_TEST},
        hidden,
        {"analysis.py": script, "answer.txt": answer + "\n"},
    )


@dataclass(frozen=True)
class DataAnalysisGenerator:
    """Generates data-analysis tasks; stateless, so one instance serves every call."""

    name: str = FAMILY
    version: str = VERSION

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        """Write n tasks to out/<id>/; the same (n, seed) gives the same bytes, another seed other data."""
        check_count(n, MAX_N)
        requirements = pinned_requirements()
        pq_requirements = pinned_requirements(("pytest", "pyarrow")) if parquet_available() else None
        return draw_and_write(n, out, lambda i: draft(seed, i, requirements, pq_requirements))
