"""Shared fixtures of the adapter tests: two generated code-repair tasks and the tiny models."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparring.tasks.families import generate
from sparring.tasks.loader import Task, find_tasks


@pytest.fixture(scope="session")
def repair_tasks(tmp_path_factory) -> Path:
    """A directory of two code-repair tasks (different modules, so their rewards are not one case)."""
    out = tmp_path_factory.mktemp("integrations") / "tasks"
    generate("code-repair", 2, 0, out)
    return out


@pytest.fixture(scope="session")
def tasks_list(repair_tasks) -> list[Task]:
    return find_tasks(repair_tasks)


@pytest.fixture(scope="session")
def tool_use_tasks(tmp_path_factory) -> Path:
    """A directory of two generated tool-use tasks: a store service as [[custom_tools]], no built-in tools."""
    out = tmp_path_factory.mktemp("integrations") / "tool-use"
    generate("tool-use", 2, 0, out)
    return out
