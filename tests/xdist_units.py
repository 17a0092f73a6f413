"""How `make test` splits the suite over pytest-xdist workers (``--dist loadgroup``).

Every test goes to a worker with the rest of its file (module-scoped fixtures are built once, and a file's
tests keep their order), and the files of a SHARED_WORKER group share one worker, because each starts a
Ray cluster (a dozen processes and a gigabyte each) or holds the real SmolLM2 model (7 GB at its peak):
two at once would slow or starve the rest of a 2-core machine.

The groups were ``xdist_group`` marks, which xdist 3.8 applies by renaming ``item._nodeid``; pytest 9
builds ``nodeid`` from another attribute, so the marks had stopped grouping anything: one file's tests
ran on several workers, and a module fixture's teardown on one removed a podman image that another
worker's test of the same file was using. The unit is now chosen in xdist's own scheduler hook, which does
not depend on how pytest spells node ids (tests/test_suite_split.py runs it).

Units start heaviest first (longest-processing-time first): xdist's own order, most tests first, started
the suite's longest single tests (the README's shell blocks, the demo, the wheel installs: 5-8 minutes
each, one test per file) last, so they ran on after everything else had finished. The seconds per unit
come from ``unit_durations.json`` beside this file, written by a recorded run (``make test`` records into
``.sparring/unit-durations.json``: copy it here when the suite changes much); a unit it does not know is
estimated from its number of tests.
"""

from __future__ import annotations

import json
import os
import resource
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "unit_durations.json"
PER_TEST_S = 1.0  # the estimate for a unit unit_durations.json does not know, per test

SHARED_WORKER = {
    "ray": (
        "tests/distributed/test_ray_executor.py",
        "tests/distributed/test_executor.py",
        "tests/images/test_ray_node_images.py",
    ),
    "smollm2": ("tests/policy/test_smollm2.py", "tests/cli/test_model_import.py"),
}
_GROUP_OF = {path: group for group, paths in SHARED_WORKER.items() for path in paths}

# The math libraries' thread pools: torch (OpenMP), numpy's BLAS. Each sizes its pool to the whole machine,
# and an OpenMP thread waiting for work spins before it sleeps, so N workers each running a pool of all
# the cores spend most of their CPU waiting on one another: tests/train/test_pretrain.py took 17 s alone
# and 120 s three at once on 2 cores, and 31 s three at once with one thread each.
THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def share_cores(environ: dict[str, str] | os._Environ[str] = os.environ) -> int | None:
    """On an xdist worker, each math library's threads: the cores this process may use over the number
    of workers, at least 1; set in ``environ`` (which the worker's subprocesses inherit) unless already
    set there. None, and nothing set, outside a worker (one process has the machine to itself).

    Called by conftest.py before anything imports torch (it reads them once, at import)."""
    workers = environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return None
    threads = max(1, len(os.sched_getaffinity(0)) // int(workers))
    for var in THREAD_VARS:
        environ.setdefault(var, str(threads))
    return threads


def work_unit(nodeid: str) -> str:
    """The unit of tests one worker runs together: the test's file, or its SHARED_WORKER group."""
    path = nodeid.split("::", 1)[0]
    return _GROUP_OF.get(path, path)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """``--dist loadgroup``: whole work units (:func:`work_unit`) to workers; other modes as xdist has them."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class ByWorkUnit(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return ByWorkUnit(config, log)  # type: ignore[arg-type]


def unit_estimates(path: Path | None = None) -> dict[str, float]:
    """Recorded seconds per work unit (empty when there is no record yet); ``$SPARRING_UNIT_DURATIONS``
    names another record."""
    path = path or Path(os.environ.get("SPARRING_UNIT_DURATIONS") or DURATIONS)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def heaviest_first(nodeids: list[str], estimates: dict[str, float]) -> list[str]:
    """``nodeids`` with whole work units ordered by estimated seconds, longest first; within a unit the
    collection order is kept, and units of equal estimate keep their collection order."""
    units: dict[str, list[str]] = {}
    for nid in nodeids:
        units.setdefault(work_unit(nid), []).append(nid)
    order = sorted(units, key=lambda u: -estimates.get(u, PER_TEST_S * len(units[u])))
    return [nid for u in order for nid in units[u]]


def _loadgroup(config: pytest.Config) -> bool:
    """Whether this run is ``--dist loadgroup`` (a worker sees ``dist`` as "no" and xdist's ``loadgroup``)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return False
    return config.getvalue("dist") == "loadgroup" or bool(getattr(config.option, "loadgroup", False))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--unit-durations-out", default=None, metavar="PATH",
        help="write the seconds each work unit took (xdist_units.py) to PATH as JSON",
    )  # fmt: skip


def cpu_seconds() -> float:
    """The CPU this process and its finished, waited-for descendants have used (user + system)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class CpuClock:
    """On the process that runs the tests: each report carries the CPU its phase used (``cpu_s``), this
    process's and that of the subprocesses it waited for (CLIs, trainers, installs). A lower bound: a
    process not waited for by its parent up the chain is not counted (a Ray cluster's daemons, and most
    of what runs inside a sandbox, whose processes are killed whole with its cgroup); in the suite's
    runs the units' sum was 1,320 CPU-seconds of the ~3,000 the two busy cores gave."""

    def __init__(self) -> None:
        self.mark = cpu_seconds()

    def pytest_runtest_logstart(self) -> None:
        self.mark = cpu_seconds()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self):  # type: ignore[no-untyped-def]
        now = cpu_seconds()
        report = (yield).get_result()
        report.user_properties.append(("cpu_s", now - self.mark))
        self.mark = now


class UnitClock:
    """Adds up, in the controller, the seconds the workers report per work unit, and the CPU they used;
    writes both at the end (the CPU beside the seconds, as ``NAME.cpu.json``)."""

    def __init__(self, out: Path) -> None:
        self.out, self.spent, self.cpu = out, defaultdict(float), defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        unit = work_unit(report.nodeid)
        self.spent[unit] += report.duration  # setup, call and teardown
        self.cpu[unit] += sum(v for k, v in report.user_properties if k == "cpu_s")

    def pytest_sessionfinish(self) -> None:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        for path, per_unit in ((self.out, self.spent), (self.out.with_suffix(".cpu.json"), self.cpu)):
            ranked = sorted(per_unit.items(), key=lambda kv: -kv[1])
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps({u: round(s, 1) for u, s in ranked}, indent=1) + "\n")
            os.replace(tmp, path)


def pytest_configure(config: pytest.Config) -> None:
    if _loadgroup(config):
        config.option.loadscopereorder = False  # the collection order below is the schedule
    out = config.getoption("--unit-durations-out")
    if out:
        config.pluginmanager.register(CpuClock(), "sparring-cpu-clock")  # on the workers (or the one process)
    if out and not hasattr(config, "workerinput"):  # the controller (or a run without workers)
        config.pluginmanager.register(UnitClock(Path(out)), "sparring-unit-clock")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``--dist loadgroup`` every worker collects the units heaviest first (the same order on
    each, as xdist requires), and the scheduler hands them out in that order."""
    if not _loadgroup(config) or not hasattr(config, "workerinput"):
        return
    by_id = {it.nodeid: it for it in items}
    items[:] = [by_id[n] for n in heaviest_first(list(by_id), unit_estimates())]
