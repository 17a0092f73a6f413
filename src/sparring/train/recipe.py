"""The RL recipe: generate tasks → build / load a policy → SFT warm start on
oracle trajectories → [sample → rollout → judge → GRPO update] × iterations,
with held-out pass rate measured before and after RL.

setup → warm start → train → evaluate, one readable function each (torchtune-style).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sparring.curriculum.sampler import BetaCurriculum
from sparring.distributed.executor import LocalExecutor, RayExecutor, RayOptions, make_executor
from sparring.env.tools import tool_schemas
from sparring.errors import ConfigError, JudgeError, TaskError
from sparring.judge.pytest_judge import PytestJudge
from sparring.judge.runner.sandbox import judge_pool_for
from sparring.monitor.alerts import AlertRules
from sparring.monitor.drift import DriftMonitor
from sparring.monitor.metrics import iteration_metrics, make_sinks, with_aliases
from sparring.monitor.progress import NoProgress, Progress
from sparring.monitor.skill import skill_metrics
from sparring.policy.scripted import OraclePolicy
from sparring.rollout.buffer import BatchLag
from sparring.rollout.episode import StageLimits
from sparring.rollout.scheduler import RolloutScheduler, RolloutSummary
from sparring.sandbox.config import make_backend
from sparring.sandbox.pool import SandboxPool
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.loader import Task, find_tasks
from sparring.train.advantages import no_signal
from sparring.train.config import RLConfig
from sparring.trajectory import Trajectory

Log = Callable[[str], None]


@dataclass
class RunResult:
    iterations: list[dict[str, Any]] = field(default_factory=list)
    heldout: dict[str, float] = field(default_factory=dict)
    sft: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    run_id: str = ""
    store: str = ""
    model: str = ""  # the base the run started from
    trained_model: str | None = None  # the newest checkpoint's weights (None: none was written)
    alerts: list[dict[str, Any]] = field(default_factory=list)
    weight_syncs: int = 0  # pushes of weights to the configured inference server (this process)
    # per held-out phase, the look-before-acting measure (sparring.monitor.skill) of families that teach it
    skill: dict[str, dict[str, float | None]] = field(default_factory=dict)
    # what the admission gate let through: tasks used, tasks skipped (with why), whether it was overridden
    admission: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        skill = {"skill": self.skill} if self.skill else {}  # only families with a skill measure have the key
        return {
            "run_id": self.run_id,
            "iterations": self.iterations,
            "heldout": self.heldout,
            "sft": self.sft,
            "seconds": round(self.seconds, 3),
            "store": self.store,
            "model": self.model,
            "trained_model": self.trained_model,
            "alerts": self.alerts,
            "weight_syncs": self.weight_syncs,
            "admission": self.admission,
            **skill,
        }


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
    import hashlib

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


def make_weight_sync(cfg: RLConfig) -> Any:
    """The configured push of trained weights to an inference server, or None."""
    ws = cfg.weight_sync
    if ws is None:
        return None
    from sparring.train.weight_sync import HTTPWeightSync

    return HTTPWeightSync(ws.url, ws.directory or cfg.workdir / "sync", kind=ws.kind, lora_name=ws.lora_name)


def make_teacher(cfg: RLConfig) -> Any:
    """The scripted policy whose trajectories the warm start imitates."""
    ws = cfg.warm_start
    if ws.teacher == "noisy" and cfg.family == "shell-look":
        from sparring.policy.look_demonstrator import LookDemonstrator

        return LookDemonstrator(ws.guess, seed=cfg.seed)
    if ws.teacher == "noisy":
        if cfg.family != "shell-ops":
            raise ConfigError(
                f"warm_start.teacher=noisy needs family shell-ops or shell-look, not {cfg.family!r}"
            )
        from sparring.policy.demonstrator import NoisyDemonstrator

        return NoisyDemonstrator(ws.epsilon, seed=cfg.seed, forget_output=ws.forget_output)
    return OraclePolicy()


async def evaluate(
    sched: RolloutScheduler, tasks: list[Task], policy: Any, run_id: str, seed: int, samples: int = 1,
    progress: Progress | None = None, label: str = "held-out evaluation",
) -> RolloutSummary:  # fmt: skip
    """Roll out every task ``samples`` times (the scheduler's on_done advances the ``rollouts`` bar)."""
    prog = progress or NoProgress()
    prog.start("rollouts", len(tasks) * samples, label)
    try:
        summary = await sched.run(tasks, policy, samples, run_id=run_id, seed=seed)
    except BaseException:  # interrupted or failed: the bar says where it stopped, never "16/16 done"
        prog.finish("rollouts", complete=False)
        raise
    prog.finish("rollouts", complete=not summary.interrupted)
    return summary


@dataclass
class _ModelHolder:
    model: Any


def _seed(cfg: RLConfig, iteration: int, round_: int = 0) -> int:
    """The sampling seed of an iteration's (re)sampling round: fixed, so a resumed run samples the same."""
    return cfg.seed * 1_000_003 + iteration * 101 + round_


def zero_variance_groups(trajs: list[Trajectory]) -> list[str]:
    """Task ids whose group has no learning signal: fewer than two trainable samples, or all rewards equal."""
    groups: dict[str, list[Trajectory]] = {}
    for t in trajs:
        groups.setdefault(t.group_id or t.id, []).append(t)
    out = []
    for members in groups.values():
        rewards = [t.reward for t in members if t.trainable and t.reward is not None]
        if no_signal(rewards):  # the one zero-variance rule (fewer than two rewards included)
            out.append(members[0].task_id)
    return out


async def sample_batch(
    cfg: RLConfig, curriculum: BetaCurriculum, sched: RolloutScheduler, policy: Any, run_id: str, it: int,
    progress: Progress | None = None,
) -> tuple[list[Trajectory], float, int]:  # fmt: skip
    """Roll out a batch; groups without reward variance are replaced by fresh tasks (DAPO's dynamic
    sampling) for up to ``resample_rounds`` rounds instead of failing the batch. Returns every
    trajectory (all are stored and counted), the seconds spent and how many groups were replaced."""
    batch = curriculum.sample(cfg.tasks_per_iteration)
    trajs: list[Trajectory] = []
    seconds = 0.0
    replaced = 0
    seen = {t.id for t in batch}
    for round_ in range(cfg.resample_rounds + 1):
        if not batch:
            break
        label = f"iteration {it} rollouts" + (f" (resampling round {round_})" if round_ else "")
        summary = await evaluate(
            sched, batch, policy, run_id, _seed(cfg, it, round_), cfg.group_size, progress, label
        )
        seconds += summary.seconds
        trajs += summary.trajectories
        roots = [t for t in summary.trajectories if t.parent_id is None]  # forked branches are extra samples
        curriculum.update((t.task_id, t.passed) for t in roots if t.trainable)
        dead = zero_variance_groups(roots)
        if round_ == cfg.resample_rounds or not dead:
            break
        batch = curriculum.replacements(len(dead), exclude=seen)
        seen |= {t.id for t in batch}
        replaced += len(batch)
    return trajs, seconds, replaced


def heldout_metrics(phase: str, summary: RolloutSummary) -> dict[str, Any]:
    """A held-out evaluation as a metrics row: per phase (``before_rl``/``after_rl``) and as one curve."""
    return {
        f"eval/heldout/{phase}/pass_rate": summary.pass_rate,
        f"eval/heldout/{phase}/reward_mean": summary.reward_mean,
        "eval/heldout/pass_rate": summary.pass_rate,
        "eval/heldout/reward_mean": summary.reward_mean,
        "eval/heldout/n": summary.requested,
    }


def skill_of(cfg: RLConfig, trajs: list[Trajectory]) -> dict[str, float | None] | None:
    """The look-before-acting measure of ``trajs`` if the run's family teaches it, else None."""
    from sparring.monitor.skill import look_skill
    from sparring.tasks.families import INSPECTIONS  # lazily, like prepare_tasks: generators import much

    inspection = INSPECTIONS.get(cfg.family) if cfg.family is not None else None
    return look_skill(trajs, inspection) if inspection is not None else None


def make_rollout_executor(cfg: RLConfig, sched: RolloutScheduler) -> LocalExecutor | RayExecutor:
    """The configured executor (``executor: ray`` starts or joins the cluster here)."""
    if cfg.executor == "local":
        return make_executor("local", sched)
    opts = RayOptions(
        address=cfg.ray_address, capacity=cfg.concurrency, backend=cfg.backend, sandbox_limits=cfg.sandbox_limits,
        export_dir=cfg.workdir / "ray-weights",
    )  # fmt: skip
    return make_executor("ray", sched, opts)


def _learning_config(dump: Any) -> Any:
    """A config dump without the settings that do not change what is learned (where sandboxes run),
    read through :class:`RLConfig` so that a setting added since the checkpoint was written compares at
    its default (a checkpoint from before ``model.max_batch`` existed still resumes)."""
    from pydantic import ValidationError

    if not isinstance(dump, dict):
        return dump
    with contextlib.suppress(ValidationError):
        dump = RLConfig.model_validate(dump).model_dump(mode="json")
    where = ("backend", "executor", "ray_address")
    return {k: v for k, v in dump.items() if k not in where}


async def run_rl(
    cfg: RLConfig,
    log: Log = lambda s: None,
    on_iteration: Callable[[dict[str, Any]], None] | None = None,
    *,
    resume: bool = False,
    progress: Progress | None = None,
) -> RunResult:
    """The whole recipe; with ``resume`` it continues from the newest checkpoint in the workdir.
    ``progress`` follows SFT steps (``sft``), RL iterations (``rl``) and each batch of rollouts
    (``rollouts``: teacher, training and held-out)."""
    from sparring.policy.hf import HFPolicy
    from sparring.policy.lora_files import load_adapter
    from sparring.train.checkpoint import (
        latest_checkpoint,
        load_state,
        load_trainer,
        load_weights,
        save_checkpoint,
    )
    from sparring.train.grpo import GRPOTrainer, SFTTrainer, sft_examples
    from sparring.train.lora import apply_lora

    with contextlib.suppress(Exception):  # transformers' weight-loading progress bars only clutter stderr
        import transformers

        transformers.utils.logging.disable_progress_bar()
    prog = progress or NoProgress()
    tick = lambda _t: prog.advance("rollouts")  # noqa: E731 (a finished sample, whatever its status)
    t0 = time.perf_counter()
    ckpt = latest_checkpoint(cfg.workdir) if resume else None
    if resume and ckpt is None:
        raise ConfigError(f"--resume: no checkpoint in {cfg.workdir / 'checkpoints'}; start without --resume")
    cfg.workdir.mkdir(parents=True, exist_ok=True)
    saved = load_state(ckpt) if ckpt is not None else None
    # Where sandboxes run (backend) does not change what is learned: a run may resume on another backend,
    # and checkpoints written before the setting existed still resume.
    if saved is not None and _learning_config(saved.get("config")) != _learning_config(
        cfg.model_dump(mode="json")
    ):
        raise ConfigError(
            f"--resume: the config differs from the one {ckpt} was written with; resume with the same config"
        )
    run_id = saved["run_id"] if saved else f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    res = RunResult(run_id=run_id)
    run_tasks = collect_tasks(cfg, log)
    backend = make_backend(cfg.backend)  # each task's spec names its layer: agent and judge run it
    try:  # admitted tasks only, decided before a store, a model or a run record is made
        run_tasks = await gate_tasks(cfg, run_tasks, PytestJudge(backend, limits=cfg.sandbox_limits), log,
                                     res.admission)  # fmt: skip
    except BaseException:
        await backend.aclose()
        raise
    store_path = cfg.workdir / "store.db"
    res.store = str(store_path)
    store = SQLiteStore(store_path)
    if saved is None:
        store.start_run(run_id, cfg.model_dump(mode="json"))
    else:
        # Rollouts of the iteration(s) after the checkpoint (a Ctrl-C or a crash stopped them) are redone
        # from here: drop them, or the run would count them twice.
        assert ckpt is not None
        cutoff = float(saved.get("saved_at") or (ckpt / "state.json").stat().st_mtime)
        if dropped := store.drop_run_after(run_id, cutoff):
            log(
                f"dropped {dropped} rollout(s) stored after {ckpt.name} by the interrupted run; they are redone"
            )
    sink = make_sinks(cfg.monitor.exporters, cfg.workdir, run_id, cfg.model_dump(mode="json"))
    pool = SandboxPool(backend, max_idle=cfg.concurrency, limits=cfg.sandbox_limits)
    # Warm judge sandboxes, launcher prestarted (judge_pool_for): bounded, so idle ones of many tasks stay few.
    judge_pool = judge_pool_for(backend, cfg.concurrency)
    judge = PytestJudge(backend, limits=cfg.sandbox_limits, pool=judge_pool)
    train_tasks, held = run_tasks.train, run_tasks.heldout
    from sparring.rollout.branching import check_branchable, parse_branch_plan

    plan = parse_branch_plan(cfg.branch_at, cfg.branches) if cfg.credit == "tree" else None
    if plan is not None:
        check_branchable(train_tasks)
    limits = StageLimits(policy_turn_s=cfg.model.turn_timeout_s)  # the policy's own time per turn
    sched = RolloutScheduler(  # credit=tree: training rollouts fork (held-out evaluations never do)
        pool,
        judge,
        store,
        concurrency=cfg.concurrency,
        max_steps=cfg.max_steps,
        on_done=tick,
        limits=limits,
        branch=plan,
    )
    eval_sched = RolloutScheduler(
        pool, judge, store, concurrency=cfg.concurrency, max_steps=cfg.heldout_max_steps, on_done=tick,
        limits=limits,
    )  # fmt: skip
    executor = make_rollout_executor(cfg, sched)  # where every scheduler of the run plays its samples
    executor.attach(eval_sched)
    m = cfg.model
    try:
        examples: list[tuple[str, str]] = []
        demo_texts: list[str] = []
        kept: list[Any] = []
        tools: list[dict[str, Any]] = []
        if saved is None and cfg.sft_steps > 0:
            # Warm start data: the teacher's trajectories, through the real sandboxes and judge, stored.
            log("warm start: teacher rollouts")
            teacher = make_teacher(cfg)
            oracle_sched = RolloutScheduler(
                pool, judge, store, concurrency=cfg.concurrency, on_done=tick
            )  # the tasks' own budgets
            executor.attach(oracle_sched)
            demo = await evaluate(
                oracle_sched, train_tasks, teacher, run_id + "-teacher", cfg.seed, cfg.warm_start.samples,
                prog, "warm start: teacher rollouts",
            )  # fmt: skip
            tools = tool_schemas(list(train_tasks[0].spec.tools), train_tasks[0].spec.custom_tools)
            kept = [
                t for t in demo.trajectories if t.trainable and (t.passed or not cfg.warm_start.passed_only)
            ]
            examples = [ex for t in kept for ex in sft_examples(t, tools)]
            if not examples:
                raise JudgeError(
                    "warm start: no usable teacher trajectory (the teacher solved none of the training tasks); check the tasks with `sparring tasks check`"
                )
            demo_texts = [p + c for p, c in examples[:200]]
            res.sft = {"teacher": teacher.name, "teacher_pass_rate": demo.pass_rate, "oracle_pass_rate": demo.pass_rate,
                       "trajectories": len(kept), "examples": len(examples), "steps": cfg.sft_steps}  # fmt: skip
        model_dir = (
            Path(saved["model"])
            if saved
            else await asyncio.to_thread(prepare_model, cfg, train_tasks, log, demo_texts, prog)
        )
        res.model = str(model_dir)
        policy = HFPolicy(
            model_dir, max_new_tokens=m.max_new_tokens, max_prompt_tokens=m.max_prompt_tokens,
            temperature=m.temperature, top_p=m.top_p, seed=cfg.seed, max_batch=m.max_batch,
            tool_format=m.tool_format,
        )  # fmt: skip
        if examples:
            # in the model's own chat template (a hub model's, or Sparring's: the same text as above)
            examples = [ex for t in kept for ex in policy.codec.sft_pairs(t.messages, tools)]
            log(f"warm start: SFT on {len(examples)} teacher turns")
            sft = SFTTrainer(policy, lr=cfg.sft_lr)
            rng = random.Random(cfg.seed)
            losses = []
            prog.start("sft", cfg.sft_steps, "warm start: SFT steps")
            for _ in range(cfg.sft_steps):
                batch = rng.sample(examples, min(cfg.sft_batch, len(examples)))
                losses.append(float((await asyncio.to_thread(sft.step, batch))["sft/loss"]))
                prog.advance("sft")
            prog.finish("sft")
            res.sft.update({"loss_first": losses[0], "loss_last": losses[-1]})

        curriculum = BetaCurriculum(train_tasks, seed=cfg.seed, **cfg.curriculum.model_dump())
        # The warm-started weights: the KL anchor, and with LoRA the frozen base a resume rebuilds on.
        ref_dir = cfg.workdir / "checkpoints" / "reference"
        keep_ref = cfg.checkpoint_every and (cfg.grpo.kl_coef > 0 or m.lora is not None)
        if saved is None and keep_ref:
            await asyncio.to_thread(policy.model.save_pretrained, str(ref_dir), safe_serialization=True)
        if m.lora is not None:
            if saved is not None:  # the base under the adapters is the warm start, not the raw model
                load_weights(ref_dir.parent, policy, sub=ref_dir.name)
            apply_lora(policy, m.lora, seed=cfg.seed)
        trainer = GRPOTrainer(policy, cfg.grpo)
        sync = make_weight_sync(cfg)
        drift = DriftMonitor(cfg.monitor.drift_reference, cfg.monitor.drift_window)
        rules = AlertRules()
        lag = BatchLag(cfg.grpo.staleness)  # sampled batches waiting for their update (staleness k)
        start = 0
        if saved is None:
            log("held-out evaluation before RL")
            before = await evaluate(
                eval_sched, held, policy, run_id + "-heldout-before", cfg.seed + 7, cfg.heldout_samples,
                prog, "held-out evaluation before RL",
            )  # fmt: skip
            res.heldout["before_rl"] = before.pass_rate
            res.heldout["before_rl_reward"] = before.reward_mean
            row0 = heldout_metrics("before_rl", before)
            if (sk := skill_of(cfg, before.trajectories)) is not None:
                res.skill["before_rl"] = sk
                row0.update(skill_metrics("eval/heldout/before_rl/skill", sk))
            sink.log(0, row0)
        else:
            assert ckpt is not None
            log(f"resuming from {ckpt}")
            res.trained_model = str(ckpt / "model")
            if m.lora is not None:
                load_adapter(policy.model, ckpt / "model")
            else:
                load_weights(ckpt, policy)
            if trainer.ref_model is not None:
                load_weights(ref_dir.parent, _ModelHolder(trainer.ref_model), sub=ref_dir.name)
            load_trainer(ckpt, trainer.optimizer)
            policy._version = int(saved["policy_version"])
            curriculum.load_state_dict(saved["curriculum"])
            drift.load_state_dict(saved["drift"])
            rules.load_state_dict(saved["alerts"])
            await lag.restore([[Trajectory.model_validate(t) for t in b] for b in saved["pending"]])
            res.skill = saved.get("skill", {})
            res.iterations, res.heldout, res.sft, res.alerts = (
                saved["iterations"],
                saved["heldout"],
                saved["sft"],
                saved["alerts_raised"],
            )
            start = int(saved["iteration"]) + 1

        if sync is not None and saved is None:  # the server starts from the warm-started weights
            await asyncio.to_thread(sync.push, policy)
            res.weight_syncs += 1
        # The control run (rl=False) changes no weight, so its iterations would only burn rollouts.
        end = cfg.iterations if cfg.rl else 0
        if end > start:
            prog.start("rl", end - start, "RL iterations")
        for it in range(start, end):
            t_it = time.perf_counter()
            if cfg.async_rollouts and lag.staleness > 0:
                # Asynchronous: the update on the batch sampled k iterations ago runs while this
                # iteration's batch is sampled; the queue's staleness check bounds how old it is.
                sampled_at = policy.version
                ready = await lag.ready(policy.version)
                sampling = asyncio.ensure_future(
                    sample_batch(cfg, curriculum, sched, policy, run_id, it, prog)
                )
                t_up = time.perf_counter()
                try:
                    update = await asyncio.to_thread(trainer.step, ready) if ready is not None else {}
                    update_s = time.perf_counter() - t_up if ready is not None else 0.0
                    if sync is not None and update.get("train/skipped") == 0.0:
                        # the new weights go to the inference side while the batch is still sampled
                        t_sync = time.perf_counter()
                        await asyncio.to_thread(sync.push, policy)
                        res.weight_syncs += 1
                        update["sync/seconds"] = round(time.perf_counter() - t_sync, 3)
                except BaseException:
                    sampling.cancel()
                    raise
                trajs, seconds, replaced = await sampling
                await lag.add(trajs)
                metrics = iteration_metrics(trajs, seconds, sampled_at, m.max_new_tokens)
            else:
                trajs, seconds, replaced = await sample_batch(
                    cfg, curriculum, sched, policy, run_id, it, prog
                )
                metrics = iteration_metrics(trajs, seconds, policy.version, m.max_new_tokens)
                ready = await lag.push(trajs, policy.version)
                t_up = time.perf_counter()
                update = await asyncio.to_thread(trainer.step, ready) if ready is not None else {}
                update_s = time.perf_counter() - t_up if ready is not None else 0.0
            metrics["rollout/replaced_groups"] = replaced
            if (sk := skill_of(cfg, trajs)) is not None:
                metrics.update(skill_metrics("rollout/skill", sk))
            metrics["rollout/rewards"] = [
                round(t.reward, 4) for t in trajs if t.trainable and t.reward is not None
            ]
            metrics.update(update)
            if ready is not None:
                metrics["timing_s/update"] = update_s
            metrics["actor/lr"] = float(trainer.optimizer.param_groups[0]["lr"])
            # the trainer's idle time: the part of the iteration it was not updating
            metrics["train/update_s"] = round(update_s, 4)
            metrics["train/idle_s"] = round(time.perf_counter() - t_it - update_s, 4)
            metrics.update(curriculum.metrics())
            for t in trajs:
                if t.trainable and t.reward is not None:
                    drift.add(f"{t.family}@{t.judge_version}", [t.reward])
            drifts = drift.check()
            for d in drifts:  # one key per family@judge; '/' would nest the metric name
                metrics[f"monitor/drift_psi/{d.key.replace('/', ':')}"] = d.psi
            alerts = rules.check(it, metrics, drifts)
            metrics["monitor/alerts"] = len(alerts)
            for a in alerts:
                log(f"ALERT {a.rule}: {a.detail}")
            res.alerts += [a.to_json() for a in alerts]
            row = {
                "iteration": it,
                "reward_mean": metrics["rollout/reward_mean"],
                "pass_rate": metrics["rollout/pass_rate"],
                "statuses": metrics["rollout/statuses"],
                "rollouts": len(trajs),
                "throughput_per_min": metrics["rollout/throughput_per_min"],
                "seconds": seconds,
                "policy_version": policy.version,
                "loss": metrics.get("train/loss"),
                "grpo_skipped": bool(metrics.get("train/skipped", 0.0)) if cfg.rl else None,
                "zero_std_groups": metrics.get("train/frac_zero_std_groups"),
                "replaced_groups": replaced,
                "alerts": [a.rule for a in alerts],
                "staleness_max": metrics.get("train/staleness_max"),
                "update_s": metrics["train/update_s"],
                "trainer_idle_s": metrics["train/idle_s"],
            }
            if "rollout/skill/inspect_first" in metrics:
                row["inspect_first"] = metrics["rollout/skill/inspect_first"]
            if "sync/seconds" in metrics:  # pushed during sampling (asynchronous)
                row["weight_sync_s"] = metrics["sync/seconds"]
            elif sync is not None and metrics.get("train/skipped") == 0.0:
                # Before the checkpoint: if the server cannot be reached the run stops with a one-line
                # error, and --resume redoes this iteration (sampling and update are deterministic).
                t_sync = time.perf_counter()
                await asyncio.to_thread(sync.push, policy)
                res.weight_syncs += 1
                row["weight_sync_s"] = metrics["sync/seconds"] = round(time.perf_counter() - t_sync, 3)
            metrics["timing_s/step"] = time.perf_counter() - t_it
            sink.log(it, with_aliases(metrics))
            res.iterations.append(row)
            if on_iteration:
                on_iteration(row)
            prog.advance("rl")
            if cfg.checkpoint_every and ((it + 1) % cfg.checkpoint_every == 0 or it + 1 == cfg.iterations):
                state = {
                    "config": cfg.model_dump(mode="json"), "run_id": run_id, "iteration": it, "model": str(model_dir),
                    "policy_version": policy.version, "curriculum": curriculum.state_dict(), "drift": drift.state_dict(),
                    "alerts": rules.state_dict(), "pending": [[t.model_dump(mode="json") for t in b] for b in lag.pending()],
                    "iterations": res.iterations, "heldout": res.heldout, "sft": res.sft, "alerts_raised": res.alerts,
                    "saved_at": time.time(),
                    **({"skill": res.skill} if res.skill else {}),
                }  # fmt: skip
                ck = await asyncio.to_thread(
                    save_checkpoint, cfg.workdir, it, policy, trainer.optimizer, state
                )
                res.trained_model = str(ck / "model")

        prog.finish("rl")
        log("held-out evaluation after RL")
        # A different sampling seed than before RL: in the control run (no updates) the two numbers
        # differ only by evaluation noise.
        after = await evaluate(
            eval_sched, held, policy, run_id + "-heldout-after", cfg.seed + 8, cfg.heldout_samples,
            prog, "held-out evaluation after RL",
        )  # fmt: skip
        res.heldout["after_rl"] = after.pass_rate
        res.heldout["after_rl_reward"] = after.reward_mean
        row1 = heldout_metrics("after_rl", after)
        if (sk := skill_of(cfg, after.trajectories)) is not None:
            res.skill["after_rl"] = sk
            row1.update(skill_metrics("eval/heldout/after_rl/skill", sk))
        sink.log(cfg.iterations if cfg.rl else 0, row1)
        res.seconds = time.perf_counter() - t0
        store.finish_run(run_id, res.to_json())
        return res
    finally:
        await executor.aclose()
        await pool.close()
        await judge_pool.close()
        await backend.aclose()
        sink.close()
        store.close()
