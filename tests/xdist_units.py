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
"""

from __future__ import annotations

import pytest

SHARED_WORKER = {
    "ray": (
        "tests/distributed/test_ray_executor.py",
        "tests/distributed/test_executor.py",
        "tests/images/test_ray_node_images.py",
    ),
    "smollm2": ("tests/policy/test_smollm2.py", "tests/cli/test_model_import.py"),
}
_GROUP_OF = {path: group for group, paths in SHARED_WORKER.items() for path in paths}


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
