"""The run's parts built from its config: the model directory, the warm start's teacher, the
weight push to an inference server and the rollout executor.

Each is a plain function of the config (and what it names); none starts a rollout or trains. Heavy
pieces (torch, transformers, ray) are imported inside the function that needs them.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparring.distributed.executor import LocalExecutor, RayExecutor, RayOptions, make_executor
from sparring.env.tools import tool_schemas
from sparring.errors import ConfigError
from sparring.monitor.progress import Progress
from sparring.policy.scripted import OraclePolicy
from sparring.rollout.scheduler import RolloutScheduler
from sparring.tasks.loader import Task
from sparring.train.config import RLConfig

if TYPE_CHECKING:
    from sparring.train.weight_sync import HTTPWeightSync  # loaded only when a run configures it

Log = Callable[[str], None]


def prepare_model(
    cfg: RLConfig,
    tasks: list[Task],
    log: Log,
    extra_corpus: list[str] | None = None,
    progress: Progress | None = None,
) -> Path:
    """The configured model dir, or a tiny model built here (cached by its settings and corpus)."""
    if cfg.model.path is not None:
        if cfg.model.path.suffix == ".gguf" and cfg.model.path.is_file():  # converted once, then cached
            from sparring.policy.gguf import cached_model_dir

            return cached_model_dir(cfg.model.path)
        if not (cfg.model.path / "config.json").is_file():
            raise ConfigError(f"model.path {cfg.model.path} is not a model directory (no config.json)")
        return cfg.model.path
    from sparring.train.model import build_tiny_model, default_corpus

    m = cfg.model
    corpus = default_corpus(
        tool_schemas(list(tasks[0].spec.tools), tasks[0].spec.custom_tools) if tasks else None, seed=cfg.seed
    )
    for t in tasks:
        corpus += [
            p.read_text(errors="replace")
            for p in sorted(t.workspace.rglob("*"))
            if p.is_file() and p.stat().st_size < 65536
        ]
        corpus.append(t.spec.instruction)
    corpus += extra_corpus or []
    key = hashlib.sha256("\x00".join(corpus).encode()).hexdigest()[:10]
    cp = f"-cp{m.copy_pretrain_steps}" if m.copy_pretrain_steps else ""
    d = cfg.workdir / "models" / f"tiny-h{m.hidden}-l{m.layers}-v{m.vocab_size}{cp}-s{cfg.seed}-{key}"
    if (d / "config.json").is_file():
        return d
    log(
        f"building a tiny model in {d}" + (f" ({m.copy_pretrain_steps} copy-pretraining steps)" if cp else "")
    )
    tmp = d.with_name(d.name + f".tmp-{uuid.uuid4().hex[:6]}")
    build_tiny_model(
        tmp, corpus, seed=cfg.seed, vocab_size=m.vocab_size, hidden=m.hidden, layers=m.layers, heads=m.heads,
        copy_pretrain_steps=m.copy_pretrain_steps, progress=progress,
    )  # fmt: skip
    tmp.rename(d)
    return d


def make_weight_sync(cfg: RLConfig) -> HTTPWeightSync | None:
    """The configured push of trained weights to an inference server, or None."""
    ws = cfg.weight_sync
    if ws is None:
        return None
    from sparring.train.weight_sync import HTTPWeightSync

    return HTTPWeightSync(ws.url, ws.directory or cfg.workdir / "sync", kind=ws.kind, lora_name=ws.lora_name)


def make_teacher(cfg: RLConfig) -> Any:
    """The scripted policy whose trajectories the warm start imitates."""
    ws = cfg.warm_start
    if ws.teacher == "noisy" and cfg.family in ("shell-look", "shell-look-deep"):
        from sparring.policy.look_demonstrator import LookDemonstrator

        return LookDemonstrator(ws.guess, seed=cfg.seed)
    if ws.teacher == "noisy":
        if cfg.family != "shell-ops":
            raise ConfigError(
                f"warm_start.teacher=noisy needs family shell-ops, shell-look or shell-look-deep, not {cfg.family!r}"
            )
        from sparring.policy.demonstrator import NoisyDemonstrator

        return NoisyDemonstrator(ws.epsilon, seed=cfg.seed, forget_output=ws.forget_output)
    return OraclePolicy()


def make_rollout_executor(cfg: RLConfig, sched: RolloutScheduler) -> LocalExecutor | RayExecutor:
    """The configured executor (``executor: ray`` starts or joins the cluster here)."""
    if cfg.executor == "local":
        return make_executor("local", sched)
    opts = RayOptions(
        address=cfg.ray_address, capacity=cfg.concurrency, backend=cfg.backend, sandbox_limits=cfg.sandbox_limits,
        export_dir=cfg.workdir / "ray-weights",
    )  # fmt: skip
    return make_executor("ray", sched, opts)
