"""Task sandboxes are CPU-bound: task.toml's limits.cpus (default one core) becomes a cgroup quota.

Measured from the host through the sandbox's cgroup accounting, never from
wall time alone: the work is a fixed amount of CPU time (two processes, each
busy until it has used 1 s of CPU), so a loaded machine only makes a run
slower, and the bound is CPU used <= quota x wall time (with a margin of one
scheduling period). The positive control is the same work with a bound far
above the machine's cores: it is never throttled, while the bounded run is.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.isolation.cgroups import CgroupSet
from sparring.tasks.loader import load_task, write_task
from sparring.tasks.sandbox_spec import spec_for_task
from sparring.tasks.spec import DEFAULT_CPUS, Limits, TaskSpec
from tests_support import ROOT_ONLY

# Two processes, each busy until it has used 1 s of CPU (bounded by 60 s of wall time).
BUSY = (
    "import os, time\nt = time.monotonic()\n"
    "while time.process_time() < 1.0 and time.monotonic() - t < 60:\n    pass\n"
    # one write of at most PIPE_BUF bytes is atomic: print() may write 'done' and '\n' apart (unbuffered
    # stdout), and under load the two children's pieces interleaved ('donedone\n\n', issue 14's CI run)
    "os.write(1, b'done\\n')"
)
WORK_S = 2.0


def _task(tmp_path, **limits):
    spec = TaskSpec(
        id="cpu-bound",
        family="code-repair",
        instruction="Make the tests pass.",
        success_criteria="All hidden tests pass.",
        limits=Limits(**limits),
    )
    return write_task(tmp_path / "task", spec, workspace={"a.txt": "a"}, hidden={}, solution={})


async def _busy(backend, spec: SandboxSpec):
    sb = await backend.create(spec)
    try:
        before = sb.cg.cpu_stat()
        t0 = time.monotonic()
        r = await sb.exec(
            ["/bin/sh", "-c", 'python3 -c "$1" & python3 -c "$1" & wait', "sh", BUSY], timeout=120
        )
        wall = time.monotonic() - t0
        after = sb.cg.cpu_stat()
        quota = _quota(sb)
    finally:
        await sb.close()
    assert r.stdout == "done\ndone\n", r.stderr
    used = {k: after[k] - before.get(k, 0) for k in after}
    used["quota_cores"] = quota
    return used, wall


def _quota(sb) -> float:
    """The CPU quota the sandbox's cgroup holds (cores), read from the host (v2 cpu.max or v1 cfs)."""
    for d in sb.cg.dirs.values():
        if (d / "cpu.max").is_file():
            q, period = (d / "cpu.max").read_text().split()
            return -1.0 if q == "max" else int(q) / int(period)
        if (d / "cpu.cfs_quota_us").is_file():
            q = int((d / "cpu.cfs_quota_us").read_text())
            return -1.0 if q < 0 else q / int((d / "cpu.cfs_period_us").read_text())
    return 0.0


def test_task_limits_carry_a_cpu_bound_into_the_sandbox_spec(tmp_path):
    default = load_task(_task(tmp_path).path)
    assert default.spec.limits.cpus == DEFAULT_CPUS == 1.0
    assert spec_for_task(default).cpus == DEFAULT_CPUS
    assert "cpus" not in (default.path / "task.toml").read_text()  # a default stays out of task.toml
    half = _task(tmp_path / "h", cpus=0.5)
    assert "cpus = 0.5" in (half.path / "task.toml").read_text()
    assert spec_for_task(half).cpus == 0.5
    assert half.digest != default.digest


@ROOT_ONLY
def test_busy_loops_in_a_half_core_task_sandbox_use_at_most_half_a_core(backend, tmp_path):
    task = _task(tmp_path, cpus=0.5)
    spec = spec_for_task(task)
    assert spec.cpus == 0.5
    bounded, wall = asyncio.run(_busy(backend, spec))
    if "usage_us" not in bounded:
        pytest.fail(f"no CPU accounting for the sandbox's cgroup (got {sorted(bounded)})")
    used_s = bounded["usage_us"] / 1e6
    assert used_s >= WORK_S * 0.95, bounded  # the work really ran, and was accounted
    assert used_s <= 0.5 * wall * 1.05 + 0.1, f"{used_s:.2f} s of CPU in {wall:.2f} s with a 0.5-core bound"
    # The kernel holds the bound (a busy host may give the loops less than that anyway, so whether they
    # were throttled depends on the load; the quota itself does not).
    assert bounded["quota_cores"] == 0.5, bounded

    # positive control: the same work with a bound far above the host's cores is never throttled
    control, control_wall = asyncio.run(_busy(backend, spec.model_copy(update={"cpus": 64.0})))
    assert control["usage_us"] / 1e6 >= WORK_S * 0.95, control
    assert control.get("nr_throttled", 0) == 0 and control["quota_cores"] == 64.0, control


def test_without_writable_cgroups_the_missing_cpu_bound_is_reported(tmp_path):
    cg = CgroupSet.create("sb-test", 64, 16, 0.5, root=tmp_path / "no-cgroups")
    assert cg.dirs == {} and cg.rlimits["as"] == 64 << 20
    assert "cpus: not enforced" in cg.degraded
    assert any(d.startswith("memory:") for d in cg.degraded)
    assert CgroupSet.create("sb-test", None, None, None, root=tmp_path / "no-cgroups").degraded == ()
