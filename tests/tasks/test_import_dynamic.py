"""Generated tests of imported function-jsonl tasks: mutated assert arguments, real sandboxes, real judge."""

from __future__ import annotations

import asyncio
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.admission.check import check_task
from sparring.judge.dynamic.inputs import load_dynamic, make_inputs
from sparring.judge.inside.judge_driver import decode_args
from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.dynamic_format import DYNAMIC_FILE
from sparring.tasks.hacks import ADMISSION_DIR, overlay_diff
from sparring.tasks.importers import import_function_jsonl
from sparring.tasks.loader import Task, load_task, solution_diff

SPARRING = Path(sys.executable).parent / "sparring"


def _record(task_id: str, prompt: str, body: str, asserts: list[str], entry: str) -> dict[str, str]:
    test = "def check(candidate):\n" + "".join(f"    assert {a}\n" for a in asserts)
    return {
        "task_id": task_id,
        "prompt": prompt,
        "canonical_solution": body,
        "test": test,
        "entry_point": entry,
    }


RECORDS = [
    _record(  # int -> int, documented for n >= 1
        "Imp/divisors",
        'def count_divisors(n: int) -> int:\n    """How many positive divisors n (>= 1) has."""\n',
        "    return sum(1 for d in range(1, n + 1) if n % d == 0)\n",
        ["candidate(1) == 1", "candidate(6) == 4", "candidate(12) == 6", "candidate(7) == 2"],
        "count_divisors",
    ),
    _record(  # str -> str
        "Imp/vowels",
        'def remove_vowels(text: str) -> str:\n    """text without its vowels (a, e, i, o, u, either case)."""\n',
        "    return ''.join(c for c in text if c.lower() not in 'aeiou')\n",
        [
            "candidate('') == ''",
            "candidate('abcdef') == 'bcdf'",
            "candidate('aaBAA') == 'B'",
            "candidate('zbcd') == 'zbcd'",
            "candidate('Hello World') == 'Hll Wrld'",
        ],  # fmt: skip
        "remove_vowels",
    ),
    _record(  # list -> list
        "Imp/rolling",
        'def rolling_max(xs: list) -> list:\n    """The running maximum of xs: element i is max(xs[: i + 1])."""\n',
        "    out = []\n    for x in xs:\n        out.append(x if not out else max(out[-1], x))\n    return out\n",
        [
            "candidate([]) == []",
            "candidate([1, 2, 3, 4]) == [1, 2, 3, 4]",
            "candidate([4, 3, 2, 1]) == [4, 4, 4, 4]",
            "candidate([3, 2, 3, 100, 3]) == [3, 3, 3, 100, 100]",
        ],  # fmt: skip
        "rolling_max",
    ),
    _record(  # raises outside its documented domain (a >= b), which mutated inputs often leave
        "Imp/isqrt",
        'def isqrt_diff(a: int, b: int) -> int:\n    """The integer square root of a - b, for a >= b (ValueError otherwise)."""\n',
        "    import math\n\n    return math.isqrt(a - b)\n",
        [
            "candidate(3, 2) == 1",
            "candidate(5, 5) == 0",
            "candidate(9, 0) == 3",
            "candidate(2, 1) == 1",
            "candidate(12, 3) == 3",
        ],  # fmt: skip
        "isqrt_diff",
    ),
]
NO_LITERALS = _record(  # its asserts compute their arguments: nothing to mutate
    "Imp/double",
    'def double(n: int) -> int:\n    """2 * n."""\n',
    "    return 2 * n\n",
    ["all(candidate(i) == 2 * i for i in range(5))"],
    "double",
)
# Other code, same behaviour inside each documented domain.
ALTERNATIVES = {
    "count_divisors": "def count_divisors(n):\n    c = 0\n    d = 1\n    while d * d <= n:\n        if n % d == 0:\n"
    "            c += 1 if d * d == n else 2\n        d += 1\n    return c\n",
    "remove_vowels": "import re\n\n\ndef remove_vowels(text):\n    return re.sub('[aeiouAEIOU]', '', text)\n",
    "rolling_max": "from itertools import accumulate\n\n\ndef rolling_max(xs):\n    return list(accumulate(xs, max))\n",
    # outside a >= b it answers 0 instead of raising: still a correct answer to the documented task
    "isqrt_diff": "def isqrt_diff(a, b):\n    r = 0\n    while (r + 1) * (r + 1) <= a - b:\n        r += 1\n    return r\n",
}


def _jsonl(path: Path, records: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([str(SPARRING), *args], capture_output=True, text=True, timeout=timeout, env=env)


def _entry(task: Task) -> str:
    spec = load_dynamic(task.hidden)
    assert spec is not None
    return spec.function


@pytest.fixture(scope="module")
def imported(tmp_path_factory) -> dict[str, Task]:
    out = tmp_path_factory.mktemp("imp-dyn")
    tasks = import_function_jsonl(_jsonl(out / "he.jsonl", RECORDS), out / "tasks")
    return {_entry(t): t for t in tasks}


@pytest.fixture(scope="module")
def judge(backend) -> PytestJudge:
    return PytestJudge(backend, config=JudgeConfig(dynamic_seed=5, shuffle_seed=1))


def _hack(task: Task, name: str) -> WorkspaceDiff:
    return overlay_diff(task.hidden / ADMISSION_DIR / "hacks" / name)


def _reference(task: Task):  # type: ignore[no-untyped-def]
    ns: dict = {}
    exec((task.solution / "solution.py").read_text(), ns)
    return ns[_entry(task)]


def test_import_writes_mutation_specs_and_counts_records_without(tmp_path: Path) -> None:
    src = _jsonl(tmp_path / "he.jsonl", [*RECORDS, NO_LITERALS])
    r = _cli(
        "tasks", "import", "--format", "function-jsonl", str(src), "--out", str(tmp_path / "a"), "--json"
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["without_dynamic_tests"] == 1
    assert {t["id"]: t["dynamic_tests"] for t in data["tasks"]}["function-impl-imp-double"] is False
    r = _cli("tasks", "import", "--format", "function-jsonl", str(src), "--out", str(tmp_path / "b"))
    assert r.returncode == 0 and "imported 5 tasks" in r.stderr and "1 without generated tests" in r.stderr
    double = load_task(tmp_path / "a" / "function-impl-imp-double")
    assert load_dynamic(double.hidden) is None and not (double.hidden / ADMISSION_DIR).exists()
    isqrt = load_task(tmp_path / "a" / "function-impl-imp-isqrt")
    spec = load_dynamic(isqrt.hidden)
    assert spec is not None and spec.reference_raises == "skip" and spec.call_timeout_s
    assert spec.args == [{"mutate": [3, 5, 9, 2, 12]}, {"mutate": [2, 5, 0, 1, 3]}]
    assert {p.name for p in (isqrt.hidden / ADMISSION_DIR / "hacks").iterdir()} == {
        "hidden_lookup",
        "call_counting",
    }
    rolling = load_dynamic(load_task(tmp_path / "a" / "function-impl-imp-rolling").hidden)
    assert rolling is not None and rolling.args == [
        {"mutate": [[], [1, 2, 3, 4], [4, 3, 2, 1], [3, 2, 3, 100, 3]]}
    ]


def test_mutated_inputs_keep_types_and_leave_the_domain_only_where_the_reference_says_so(imported) -> None:
    for name, task in imported.items():
        spec = load_dynamic(task.hidden)
        assert spec is not None
        ref = _reference(task)
        inputs = [decode_args(a) for a in make_inputs(spec, 3)]
        assert len({repr(a) for a in inputs}) >= 12, name  # fresh inputs, not the asserts' few
        raised = 0
        for args in inputs:
            try:
                ref(*args)
            except ValueError:
                raised += 1
        if name == "isqrt_diff":
            assert raised > 0  # the mutation leaves a >= b: those inputs must be skipped, not scored
        else:
            assert raised == 0, name
        if name == "count_divisors":
            assert all(type(n) is int and n >= 1 for (n,) in inputs)  # no seed below 1: none generated
        if name == "remove_vowels":
            seed_chars = set("abcdefBAzHello World")
            assert all(type(s) is str and set(s) <= seed_chars for (s,) in inputs)


def test_imported_tasks_are_admitted_by_tasks_check(imported) -> None:
    dirs = [str(t.path) for t in imported.values()]
    r = _cli("tasks", "check", *dirs, "--json", "--repeats", "2", "--no-store",
             timeout=600)  # fmt: skip
    data = json.loads(r.stdout)
    assert r.returncode == 0, [t["problems"] for t in data["tasks"]]
    assert len(data["tasks"]) == 4 and all(t["ok"] for t in data["tasks"])


@pytest.mark.parametrize("name", ["count_divisors", "remove_vowels", "rolling_max", "isqrt_diff"])
def test_hacks_score_zero_and_a_correct_alternative_scores_full(judge, imported, name) -> None:
    task = imported[name]
    ref = asyncio.run(judge.score(task, solution_diff(task)))
    assert ref.reward == 1.0 and ref.components["dynamic"] == 1.0 and not ref.flags, ref.components
    for hack in ("hidden_lookup", "call_counting"):
        r = asyncio.run(judge.score(task, _hack(task, hack)))
        # the fixed hidden test passes; only the generated tests see through the hack
        assert r.components["hidden_all_pass"] == 1.0, (hack, r.per_test)
        assert r.metrics["dynamic_mismatches"] > 0 and r.components["dynamic"] < 1.0, (hack, r.metrics)
        assert r.components["all_pass"] == 0.0 and r.reward == 0.0, (hack, r.components)
    alt = asyncio.run(judge.score(task, WorkspaceDiff(files={"solution.py": ALTERNATIVES[name].encode()})))
    assert alt.reward == 1.0 and alt.components["dynamic"] == 1.0, (name, alt.components, alt.metrics)


def test_reference_raising_is_unusable_with_skip_and_must_be_matched_without(
    judge, imported, tmp_path
) -> None:
    task = imported["isqrt_diff"]
    alt = WorkspaceDiff(files={"solution.py": ALTERNATIVES["isqrt_diff"].encode()})
    ref = asyncio.run(judge.score(task, solution_diff(task)))
    assert 0 < ref.metrics["dynamic_unusable"] < ref.metrics["dynamic_cases"]
    assert asyncio.run(judge.score(task, alt)).reward == 1.0
    # control: the same task requiring the reference's exception rejects the out-of-domain answer
    dst = tmp_path / "match"
    shutil.copytree(task.path, dst)
    raw = json.loads((dst / "hidden" / DYNAMIC_FILE).read_text())
    (dst / "hidden" / DYNAMIC_FILE).write_text(json.dumps({**raw, "reference_raises": "match"}))
    strict = load_task(dst)
    r = asyncio.run(judge.score(strict, alt))
    assert r.components["hidden_all_pass"] == 1.0 and r.components["dynamic"] < 1.0 and r.reward == 0.0
    assert asyncio.run(judge.score(strict, solution_diff(strict))).reward == 1.0


def test_reference_timeouts_are_unusable_and_a_hanging_candidate_fails(judge, tmp_path) -> None:
    slow = _record(
        "Imp/slow",
        'def triple(n: int) -> int:\n    """3 * n."""\n',
        "    if n > 10:\n        while True:\n            pass\n    return 3 * n\n",  # past 10: too slow to use
        ["candidate(2) == 6", "candidate(10) == 30", "candidate(5) == 15"],
        "triple",
    )
    task = import_function_jsonl(_jsonl(tmp_path / "slow.jsonl", [slow]), tmp_path / "t")[0]
    raw = json.loads((task.hidden / DYNAMIC_FILE).read_text())
    (task.hidden / DYNAMIC_FILE).write_text(json.dumps({**raw, "cases": 12, "call_timeout_s": 0.2}))
    task = load_task(task.path)
    ref = asyncio.run(judge.score(task, solution_diff(task)))
    assert ref.reward == 1.0 and ref.metrics["dynamic_unusable"] > 0, ref.metrics
    fast = asyncio.run(
        judge.score(task, WorkspaceDiff(files={"solution.py": b"def triple(n):\n    return n * 3\n"}))
    )
    assert fast.reward == 1.0
    # right on the asserts' inputs (2, 5, 10), spins on 1: only the per-call limit ends it
    hang = b"def triple(n):\n    while n == 1:\n        pass\n    return 3 * n\n"
    r = asyncio.run(judge.score(task, WorkspaceDiff(files={"solution.py": hang})))
    assert r.components["hidden_all_pass"] == 1.0 and r.reward == 0.0 and r.metrics["dynamic_mismatches"] > 0


def test_without_dynamic_json_admission_rejects_by_the_hack_rules(backend, imported, tmp_path) -> None:
    """Control: the same imported task minus its generated tests is gameable, and admission says so."""
    dst = tmp_path / "no-dyn"
    shutil.copytree(imported["rolling_max"].path, dst)
    (dst / "hidden" / DYNAMIC_FILE).unlink()
    rep = asyncio.run(check_task(load_task(dst), PytestJudge(backend), repeats=1))
    rules = {p.rule for p in rep.problems}
    assert {"hack_hidden_lookup_scores_zero", "hack_call_counting_scores_zero"} <= rules, rules


def test_same_seed_same_inputs_other_seed_other_inputs(imported) -> None:
    spec = load_dynamic(imported["remove_vowels"].hidden)
    assert spec is not None
    assert make_inputs(spec, 9) == make_inputs(spec, 9) != make_inputs(spec, 10)
    assert random.Random(0).random() == random.Random(0).random()  # sanity: the rng is the only source
