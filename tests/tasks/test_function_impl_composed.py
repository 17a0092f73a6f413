"""Composed function-impl tasks: hundreds of functions distinct in behaviour, deterministic per seed,
tiered by composition depth, and admitted by `tasks check` (real generator, real CLI, real sandboxes)."""

from __future__ import annotations

import asyncio
import os
import random
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from sparring.admission.check import check_tasks
from sparring.judge.dynamic.inputs import load_dynamic, make_inputs
from sparring.judge.inside.judge_driver import decode_args, encode
from sparring.judge.pytest_judge import PytestJudge
from sparring.tasks.families import generate
from sparring.tasks.families.function_impl import BUILTINS, builtin_fingerprints
from sparring.tasks.families.function_impl_compose import fingerprint
from sparring.tasks.families.function_impl_steps import SOURCES
from sparring.tasks.loader import Task

SPARRING = Path(sys.executable).parent / "sparring"
N = 600
TRIVIAL_SOURCES = {s.key for s in SOURCES if s.trivial}


def _reference(task: Task) -> tuple[Any, str]:
    """The task's reference function (from its solution/) and its parameter's type."""
    ns: dict[str, Any] = {}
    exec((task.solution / "solution.py").read_text(), ns)
    name = task.spec.judge.hidden_tests[0].split("::")[0].removeprefix("test_hidden_").removesuffix(".py")
    m = re.search(rf"def {name}\(\w+: ([^)]+)\)", (task.workspace / "solution.py").read_text())
    assert m is not None, task.id
    return ns[name], m.group(1)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> list[Task]:
    return generate("function-impl", N, 0, tmp_path_factory.mktemp("fi-big"))


def _composed(tasks: list[Task]) -> list[Task]:
    return [t for t in tasks if "composed" in t.spec.tags]


def test_at_least_500_functions_distinct_in_behaviour(big: list[Task]) -> None:
    composed = _composed(big)
    assert len(big) == N and len(composed) == N - len(BUILTINS)
    groups: dict[str, list[str]] = defaultdict(list)
    for t in composed:
        fn, arg_type = _reference(t)
        fp = fingerprint(fn, arg_type)
        assert fp is not None, t.id  # total on the shared probes of its argument type
        groups[fp[0]].append(t.id)
    assert len(groups) >= 500, len(groups)
    assert all(len(ids) == 1 for ids in groups.values()), [ids for ids in groups.values() if len(ids) > 1][:3]
    assert not set(groups) & builtin_fingerprints()  # no composed function is a built-in under another name


def test_fingerprint_sees_through_renaming_and_tells_functions_apart(big: list[Task]) -> None:
    """Positive control: a renamed copy has the same fingerprint, a one-step change does not."""
    t = next(t for t in _composed(big) if ") -> int:" in (t.workspace / "solution.py").read_text())
    fn, arg_type = _reference(t)
    src = (t.solution / "solution.py").read_text()
    ns: dict[str, Any] = {}
    exec(re.sub(r"def (\w+)\(", "def renamed(", src, count=1), ns)
    assert fingerprint(ns["renamed"], arg_type) == fingerprint(fn, arg_type)
    changed = src.replace("    return ", "    return 1 + ", 1)
    ns = {}
    exec(changed, ns)
    other = ns[fn.__name__]
    assert fingerprint(other, arg_type) != fingerprint(fn, arg_type)


def test_tiers_follow_composition_depth(big: list[Task]) -> None:
    tiers = defaultdict(int)
    for t in _composed(big):
        parts = t.spec.provenance.source.removeprefix("composed:").split("|")
        expected = len(parts) - (1 if parts[0] in TRIVIAL_SOURCES else 0)  # copying the argument is no step
        assert t.spec.difficulty == expected, t.id
        steps = re.findall(r"^ {4}\d+\. ", (t.workspace / "solution.py").read_text(), re.M)
        assert len(steps) == len(parts), t.id  # the docstring states every step, source and final included
        tiers[t.spec.difficulty] += 1
    assert set(tiers) == {1, 2, 3, 4, 5} and min(tiers.values()) >= 5, dict(tiers)
    assert all(t.spec.difficulty == 1 and "builtin" in t.spec.tags for t in big[: len(BUILTINS)])


def test_references_are_total_on_the_generated_test_domain(big: list[Task]) -> None:
    """Every input the judge's generated tests can draw is in the documented domain: the reference returns
    plain data on it; and the fixed hidden asserts pass on the reference."""
    for t in _composed(big)[::5]:
        spec = load_dynamic(t.hidden)
        assert spec is not None and spec.cases * spec.repeat >= 80, t.id
        fn, _ = _reference(t)
        for seed in range(2):
            for args in make_inputs(spec, seed):
                encode(fn(*decode_args(args)))
        ns: dict[str, Any] = {}
        exec((t.hidden / t.spec.judge.hidden_tests[0].split("::")[0]).read_text().split("\n", 1)[1], ns)
        ns["check"](fn)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SPARRING), *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "200"})  # fmt: skip


def test_same_seed_byte_identical_dirs_through_the_cli(tmp_path: Path) -> None:
    n = "80"
    for d in ("a", "b"):
        r = _cli(
            "tasks",
            "generate",
            "function-impl",
            "--n",
            n,
            "--seed",
            "9",
            "--out",
            str(tmp_path / d),
            "--no-check",
        )
        assert r.returncode == 0, r.stderr
    a, b = _tree(tmp_path / "a"), _tree(tmp_path / "b")
    assert len([k for k in a if k.endswith("task.toml")]) == int(n) and a == b
    other = generate("function-impl", int(n), 10, tmp_path / "c")
    assert {t.id for t in other} != {p.split("/")[0] for p in a}
    # task i of a seed does not depend on n
    prefix = generate("function-impl", 50, 9, tmp_path / "p")
    assert all(_tree(t.path) == _tree(tmp_path / "a" / t.id) for t in prefix)


ADMISSION_PER_TIER = 6
ADMISSION_REPEATS = 3


@pytest.mark.slow
def test_sample_across_tiers_is_admitted(big: list[Task], backend) -> None:  # type: ignore[no-untyped-def]
    by_tier: dict[int, list[Task]] = defaultdict(list)
    for t in _composed(big):
        by_tier[t.spec.difficulty].append(t)
    rng = random.Random(0)
    sample = [t for tier in sorted(by_tier) for t in rng.sample(by_tier[tier], ADMISSION_PER_TIER)]
    assert len(sample) == 30
    reports = asyncio.run(check_tasks(sample, PytestJudge(backend), repeats=ADMISSION_REPEATS))
    assert all(r.ok for r in reports), [r.to_json() for r in reports if not r.ok]
