"""The run's tasks: the family's generated ones and the user's directories, through the admission gate.

Contract: :func:`collect_tasks` gathers every task the config names (generating a family's tasks
once, cached under the workdir by family version and seed); :func:`gate_tasks` keeps only admitted
ones (a generated reject is skipped with its reason, a rejected task of the user's own stops the
run with one line); the held-out set never shares a task with the training set unless that is all
there is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sparring.errors import TaskError
from sparring.tasks.loader import Task, find_tasks
from sparring.train.config import RLConfig

Log = Callable[[str], None]


@dataclass
class RunTasks:
    """The run's tasks, by where they came from: the generated family's and the user's (``tasks``,
    ``heldout_tasks``). The admission gate skips a generated reject but refuses a rejected own task."""

    generated_train: list[Task] = field(default_factory=list)
    generated_heldout: list[Task] = field(default_factory=list)
    own_train: list[Task] = field(default_factory=list)
    own_heldout: list[Task] = field(default_factory=list)

    @property
    def train(self) -> list[Task]:
        return _unique(self.generated_train + self.own_train)

    @property
    def heldout(self) -> list[Task]:
        held = _unique(self.generated_heldout + self.own_heldout)
        train_ids = {t.id for t in self.train}
        return [t for t in held if t.id not in train_ids] or held or self.train

    def all(self) -> list[Task]:
        return _unique(self.train + self.heldout)


def _unique(tasks: list[Task]) -> list[Task]:
    seen: dict[str, Task] = {}
    for t in tasks:
        seen.setdefault(t.digest, t)
    return list(seen.values())


def generate_family_tasks(cfg: RLConfig, log: Log) -> tuple[list[Task], list[Task]]:
    """Generate (or reuse) the family's train and held-out tasks; held-out ones come from a disjoint seed range."""
    from sparring.tasks.families import generate, get_family

    if cfg.family is None:
        return [], []
    # The generator's version is part of the cache key: a changed generator never reuses old tasks.
    root = cfg.workdir / "tasks" / f"{cfg.family}-v{get_family(cfg.family).version}-s{cfg.seed}"
    out = []
    for name, n, seed in (("train", cfg.n_train, cfg.seed), ("heldout", cfg.n_heldout, cfg.seed + 100_003)):
        d = root / f"{name}-{n}"
        if d.is_dir() and len(list(d.glob("*/task.toml"))) == n:
            out.append(find_tasks(d))
        else:
            log(f"generating {n} {name} tasks ({cfg.family})")
            out.append(generate(cfg.family, n, seed, d))
    return out[0], out[1]


def collect_tasks(cfg: RLConfig, log: Log) -> RunTasks:
    """Every task of the run: the family's (generated) and the user's directories."""
    gen_train, gen_held = generate_family_tasks(cfg, log)
    own_train = find_tasks(cfg.tasks) if cfg.tasks is not None else []
    own_held = find_tasks(cfg.heldout_tasks) if cfg.heldout_tasks is not None else []
    if own_train and not gen_held and not own_held:
        log("no heldout_tasks: the held-out evaluation runs the training tasks (no generalisation measured)")
    return RunTasks(gen_train, gen_held, own_train, own_held)


async def gate_tasks(
    cfg: RLConfig, run: RunTasks, judge: Any, log: Log, summary: dict[str, Any] | None = None
) -> RunTasks:
    """Only admitted tasks are used: tasks without a verdict are checked now (verdicts cached by digest and
    judge version, :mod:`sparring.admission.gate`); a generated reject is skipped with its reason, a
    rejected task of your own stops the run (one line). ``allow_unadmitted`` lets every task through."""
    from sparring.admission.gate import admit, allowed_by_env

    out = summary if summary is not None else {}
    if cfg.allow_unadmitted or allowed_by_env():
        out.update(override=True, used=len(run.all()), skipped=[])
        return run
    verdicts = await admit(run.all(), judge, repeats=cfg.admission_repeats or None,
                           concurrency=max(3, cfg.concurrency), log=log)  # fmt: skip
    ok = {v.task.digest for v in verdicts if v.ok}
    own = {t.digest for t in run.own_train + run.own_heldout}
    for v in verdicts:
        if not v.ok and v.task.digest in own:
            raise TaskError(
                f"{v.line()}: fix it, then `sparring tasks check` (allow_unadmitted: true overrides)"
            )
    for v in verdicts:
        if not v.ok:
            log(f"admission: skipping {v.line().removeprefix('task ')}")
    kept = RunTasks(*([t for t in part if t.digest in ok] for part in
                      (run.generated_train, run.generated_heldout, run.own_train, run.own_heldout)))  # fmt: skip
    if not kept.train:
        raise TaskError("no admitted training task: every one was rejected (see `sparring tasks check`)")
    out.update(override=False, used=len(kept.all()),
               skipped=[{"id": v.task.id, "why": v.reason} for v in verdicts if not v.ok])  # fmt: skip
    return kept


def prepare_tasks(cfg: RLConfig, log: Log) -> tuple[list[Task], list[Task]]:
    """The run's train and held-out tasks, before the admission gate (:func:`gate_tasks`)."""
    run = collect_tasks(cfg, log)
    return run.train, run.heldout
