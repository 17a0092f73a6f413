"""`sparring sandbox bench` reports the pre-fork path and the cold path of one run side by side."""

from __future__ import annotations

import asyncio

import pytest

from sparring.sandbox.bench import OPS, run_bench
from tests_support import ROOT_ONLY

pytestmark = [pytest.mark.slow, ROOT_ONLY]


def test_the_bench_measures_both_create_paths_in_one_run():
    out = asyncio.run(run_bench(n=3, concurrency=1, files=10, changed=1, execs=1, prefork=2))
    for k in OPS:
        assert f"{k}_ms" in out and f"{k}_p99_ms" in out
        assert (f"cold_{k}_ms" in out) == (k != "acquire")  # the warm-pool acquire is measured once
    assert out["prefork"] == 2 and out["prefork_hits"] >= 1 and out["prefork_idle"] == 2
    assert out["prefork_idle_rss_per_sandbox_mb"] > 0
    for k in (
        "burst_create_ms",
        "sustained_creates_per_s",
        "cold_burst_create_ms",
        "cold_sustained_creates_per_s",
        "alone_reset_ms",
        "alone_exec_ms",
    ):
        assert out[k] > 0, k
    assert out["burst_prefork_hits"] >= 1


def test_prefork_zero_measures_the_cold_path_only():
    out = asyncio.run(run_bench(n=2, concurrency=1, files=10, changed=1, execs=1, prefork=0))
    assert out["prefork"] == 0 and out["create_ms"] > 0
    assert not [k for k in out if k.startswith(("cold_", "prefork_"))]
