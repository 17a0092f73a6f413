"""Sparring: agent reinforcement-learning post-training on real execution.

The names a user needs, importable from the top (``from sparring import Environment``) and loaded
on first use, so ``import sparring`` stays light (no torch, no sandbox machinery until asked for):

- the loop's pieces: :class:`Environment` (one task, one sandbox, one conversation), tasks
  (:class:`Task`, :func:`load_task`, :func:`find_tasks`, :class:`TaskSpec`), admission
  (:func:`check_task`);
- sandboxes: :func:`make_backend`, :class:`LocalBackend`, :class:`SandboxSpec`, :class:`SandboxPool`;
- the judge: :class:`PytestJudge`, :class:`JudgeConfig`, :class:`JudgeResult`;
- policies and rollouts: :func:`make_policy`, :class:`RolloutScheduler`, :func:`run_episode`,
  :class:`Trajectory`;
- the store: :class:`SQLiteStore`, :class:`TrajQuery`;
- training: :class:`RLConfig`, :func:`load_config`, :class:`RLRecipe` (one method per stage) and
  :func:`run_rl` (the whole recipe in one call), :func:`group_advantages`;
- the root of every error Sparring raises: :class:`SparringError`.

Everything else lives in its room (``sparring.sandbox``, ``sparring.judge``, ...).
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> the module that defines it. Strings, not imports: nothing loads until a name is used.
_HOME = {
    "Environment": "sparring.env.environment",
    "Task": "sparring.tasks.loader",
    "TaskSpec": "sparring.tasks.spec",
    "find_tasks": "sparring.tasks.loader",
    "load_task": "sparring.tasks.loader",
    "check_task": "sparring.admission.check",
    "make_backend": "sparring.sandbox.config",
    "LocalBackend": "sparring.sandbox.local.backend",
    "SandboxSpec": "sparring.sandbox.base",
    "SandboxPool": "sparring.sandbox.pool",
    "PytestJudge": "sparring.judge.pytest_judge",
    "JudgeConfig": "sparring.judge.pytest_judge",
    "JudgeResult": "sparring.judge.base",
    "make_policy": "sparring.policy.spec",
    "RolloutScheduler": "sparring.rollout.scheduler",
    "run_episode": "sparring.rollout.episode",
    "Trajectory": "sparring.trajectory",
    "SQLiteStore": "sparring.store.sqlite",
    "TrajQuery": "sparring.store.base",
    "RLConfig": "sparring.train.config",
    "load_config": "sparring.train.config",
    "RLRecipe": "sparring.train.recipe",
    "run_rl": "sparring.train.recipe",
    "group_advantages": "sparring.train.advantages",
    "SparringError": "sparring.errors",
}

__all__ = sorted(_HOME) + ["__version__"]


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'sparring' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # resolved once; later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
