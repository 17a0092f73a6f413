"""Shared fixtures: a real sandbox backend and small hand-written tasks."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import xdist_units

xdist_units.share_cores()  # first: before any module imports torch (tests/xdist_units.py says why)

from demo_support import demo_control, demo_quick, demo_root  # noqa: E402, F401 (session fixtures)
from model_support import hub_model_dir, smollm2_dir, tiny_model_dir, tiny_qwen2_model_dir  # noqa: E402, F401 (session fixtures)
from sparring.tasks.loader import Task  # noqa: E402
from tests_support import make_clamp_task  # noqa: E402

# Tests of the loop's mechanics roll out hand-made fixture tasks: the admission gate lets them through
# (as --allow-unadmitted). The gate's own tests remove it (tests/admission/test_gate.py, tests/train/test_train_own_tasks.py).
os.environ.setdefault("SPARRING_ALLOW_UNADMITTED", "1")

# Property tests under load (CI's machine is shared): hypothesis' default 200 ms deadline per example and
# its "data generation is too slow" health check measure the machine, not the code. Loaded here, before
# any test module is imported, so every @given and every @settings(...) that leaves these unset inherits it
# (a test's own suppress_health_check replaces this list: name too_slow there too).
settings.register_profile("sparring", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("sparring")


@pytest.fixture(scope="session")
def backend():
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: run `make setup` (tests need real sandboxes)")
    from sparring.sandbox.local.backend import LocalBackend

    return LocalBackend()


@pytest.fixture(scope="session")
def clamp_task(tmp_path_factory) -> Task:
    return make_clamp_task(tmp_path_factory.mktemp("tasks") / "clamp-bug")


@pytest.fixture
def workspace(tmp_path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    (d / "f.txt").write_text("orig\n")
    (d / "sub").mkdir()
    (d / "sub" / "g.txt").write_text("g\n")
    return d


# The suite in parallel: xdist_units.py (whole files, or groups of them, to one worker).
from xdist_units import (  # noqa: E402, F401 (hooks: the schedule, its order, the recorded durations)
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_xdist_make_scheduler,
)
