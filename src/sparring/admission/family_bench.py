"""Per-family admission yield: how many distinct tasks a family generates and how many `tasks check` admits.

For one family: generate N tasks from a seed, count the distinct ones (by content
digest; also by instruction and by reference solution, since a digest differs as
soon as any byte of random data does), check ``admit`` of them (all by default)
exactly as ``sparring tasks check`` does (same judge, same reference runs,
``concurrency`` tasks at once sharing ``judge_concurrency`` judge slots; a sample
is spread evenly over the N), and
report admitted and rejected counts by rule and the wall seconds per checked
task, with a projection for all N when only a sample was checked. ``admit=0``
is the cheap generate-only count.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from sparring.admission.check import REFERENCE_RUNS, CheckReport, check_tasks, default_judge_concurrency
from sparring.judge.pytest_judge import PytestJudge
from sparring.sandbox.base import SandboxBackend
from sparring.tasks.digest import tree_digest
from sparring.tasks.environment import layer_for
from sparring.tasks.families import generate, get_family

_T = TypeVar("_T")


def spread_sample(items: Sequence[_T], k: int) -> list[_T]:
    """``k`` items evenly spaced over ``items`` (the first included), in order: a family's task order
    can follow its generator's parameters (function-impl: built-ins first), so the first k would not do."""
    n, k = len(items), min(k, len(items))
    return [items[i * n // k] for i in range(k)] if k > 0 else []


async def run_family_admission(
    backend: SandboxBackend,
    family: str,
    n: int = 200,
    seed: int = 0,
    admit: int | None = None,
    concurrency: int = 3,
    judge_concurrency: int | None = None,
    repeats: int | None = None,
    on_done: Callable[[CheckReport], None] | None = None,
    per_seed: int | None = None,
) -> dict[str, Any]:
    """One family's yield record (see the module docstring); ``admit=None`` checks all ``n``. ``on_done``
    gets each task's report as its check ends (for progress). ``per_seed``: the ``n`` tasks come from
    consecutive seeds, at most this many from each (a family that makes fewer distinct tasks per seed
    than ``n``, like function-impl's 1,000, still reaches ``n``)."""
    get_family(family)
    with tempfile.TemporaryDirectory(prefix=f"sparring-family-bench-{family}-") as tmp:
        t0 = time.perf_counter()
        tasks = []
        step = per_seed or n
        for i, start in enumerate(range(0, n, step)):
            tasks += generate(family, min(step, n - start), seed + i, Path(tmp) / f"{family}-{seed + i}")
        gen_s = time.perf_counter() - t0
        sample = tasks if admit is None else spread_sample(tasks, admit)
        t1 = time.perf_counter()
        for t in {t.spec.environment.model_dump_json(): t for t in sample}.values():
            layer_for(t.spec.environment)  # build each pinned layer once, outside the timed part
        layers_s = time.perf_counter() - t1
        load_before = os.getloadavg()[0]
        jc = judge_concurrency or default_judge_concurrency()
        started = time.perf_counter()
        reports = (
            await check_tasks(
                sample, PytestJudge(backend), repeats, concurrency, on_done=on_done, judge_concurrency=jc
            )
            if sample
            else []
        )
        wall = time.perf_counter() - started
        distinct = {
            "distinct": len({t.digest for t in tasks}),
            "distinct_instructions": len({t.spec.instruction for t in tasks}),
            "distinct_solutions": len({tree_digest(t.solution) for t in tasks}),
        }
    rejected = [r for r in reports if not r.ok]
    per_task = wall / len(reports) if reports else None
    return {
        "family": family,
        "seed": seed,
        "seeds": -(-n // (per_seed or n)),
        "generated": len(tasks),
        **distinct,
        "generate_s_per_task": round(gen_s / max(1, len(tasks)), 3),
        "checked": len(reports),
        "admitted": len(reports) - len(rejected),
        "rejected": len(rejected),
        "rejected_by_rule": dict(sorted(Counter(rule for r in rejected for rule in r.rules).items())),
        "rejected_ids": [r.id for r in rejected][:10],
        "admission_s": round(wall, 1),
        "seconds_per_task": round(per_task, 2) if per_task is not None else None,
        "projected_admission_s_all": round(per_task * len(tasks), 0) if per_task is not None else None,
        "layers_s": round(layers_s, 1),
        "repeats": repeats or REFERENCE_RUNS,
        "concurrency": concurrency,
        "judge_concurrency": jc,
        "cpus": os.cpu_count(),
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
    }


__all__ = ["run_family_admission"]
