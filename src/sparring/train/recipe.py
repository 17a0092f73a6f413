"""The RL recipe, torchtune-style: one class, one method per stage.

generate tasks → build / load a policy → SFT warm start on the teacher's trajectories →
[sample → rollout → judge → GRPO update] × iterations, with the held-out pass rate measured
before and after RL::

    recipe = RLRecipe(cfg, log)
    result = await recipe.run()        # setup → warm_start → prepare_training →
                                       # evaluate("before_rl") or resume() →
                                       # iteration(i) [+ checkpoint(i)] ... → evaluate("after_rl")

:func:`run_rl` is that as one call (what ``sparring train`` and ``sparring demo`` use). The stages'
pieces live in their own modules: the tasks and the admission gate (:mod:`.run_tasks`), the parts
built from the config (:mod:`.components`), held-out evaluation (:mod:`.evaluation`), the batch
sampling (:mod:`.sampling`) and the checkpoint's run state (:mod:`.run_state`).

Contract: the stages do what the single function did before them, in the same order, so the rows,
metrics, checkpoints and the run's JSON are unchanged; a run resumed from its newest checkpoint
(``resume=True``) reaches the state of one that never stopped (tests/train/test_resume.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparring.curriculum.sampler import BetaCurriculum
from sparring.distributed.executor import LocalExecutor, RayExecutor
from sparring.env.tools import tool_schemas
from sparring.errors import ConfigError, JudgeError
from sparring.judge.pytest_judge import PytestJudge
from sparring.judge.runner.sandbox import judge_pool_for
from sparring.monitor.alerts import AlertRules
from sparring.monitor.drift import DriftMonitor
from sparring.monitor.metrics import MultiSink, iteration_metrics, make_sinks, with_aliases
from sparring.monitor.progress import NoProgress, Progress
from sparring.monitor.skill import skill_metrics
from sparring.rollout.buffer import BatchLag
from sparring.rollout.episode import StageLimits
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.base import SandboxBackend
from sparring.sandbox.config import make_backend
from sparring.sandbox.pool import SandboxPool
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.loader import Task
from sparring.train.components import make_rollout_executor, make_teacher, make_weight_sync, prepare_model
from sparring.train.config import RLConfig
from sparring.train.evaluation import curve_point, evaluate, heldout_metrics, skill_of
from sparring.train.run_state import RunResult, check_same_config, interrupted_after, run_state
from sparring.train.run_tasks import collect_tasks, gate_tasks
from sparring.train.sampling import sample_batch
from sparring.trajectory import Trajectory

if TYPE_CHECKING:  # torch and transformers behind these: imported where used
    from sparring.policy.hf import HFPolicy
    from sparring.train.grpo import GRPOTrainer
    from sparring.train.weight_sync import HTTPWeightSync

Log = Callable[[str], None]


@dataclass
class _ModelHolder:
    model: Any


# The held-out phases: the suffix of their run id, their sampling seed's offset and their log line.
# A different seed after RL than before: in the control run (no updates) the two numbers differ only
# by evaluation noise.
_PHASES = {"before_rl": ("-heldout-before", 7, "before RL"), "after_rl": ("-heldout-after", 8, "after RL")}
# An evaluation during RL (``eval_every``) samples with the after-RL seed: the curve's points after
# RL differ by the weights, not by the sampling.
_DURING_SEED = _PHASES["after_rl"][1]


class RLRecipe:
    """One training run. Call :meth:`run`, or the stages in its order (each uses what the earlier
    ones built); :meth:`close` releases the sandboxes, pools, store and sinks whatever stage failed.

    ``log`` gets one-line messages; ``on_iteration`` each iteration's row; ``progress`` follows SFT
    steps (``sft``), RL iterations (``rl``) and each batch of rollouts (``rollouts``: teacher,
    training and held-out). With ``resume`` the run continues from the newest checkpoint in the workdir.
    """

    # Built by setup()
    run_id: str
    result: RunResult
    store: SQLiteStore
    sink: MultiSink
    backend: SandboxBackend
    pool: SandboxPool  # the agent's sandboxes
    judge: PytestJudge  # with its own pool of warm judge sandboxes
    train_tasks: list[Task]
    heldout_tasks: list[Task]
    sched: RolloutScheduler  # training rollouts (credit=tree: they fork)
    eval_sched: RolloutScheduler  # held-out evaluations, which never fork
    executor: LocalExecutor | RayExecutor
    # Built by warm_start() and prepare_training()
    model_dir: Path
    policy: HFPolicy
    trainer: GRPOTrainer
    curriculum: BetaCurriculum
    drift: DriftMonitor
    rules: AlertRules
    lag: BatchLag
    sync: HTTPWeightSync | None

    def __init__(
        self,
        cfg: RLConfig,
        log: Log = lambda s: None,
        on_iteration: Callable[[dict[str, Any]], None] | None = None,
        *,
        resume: bool = False,
        progress: Progress | None = None,
    ) -> None:
        self.cfg = cfg
        self.log = log
        self.on_iteration = on_iteration
        self.resuming = resume
        self.prog = progress or NoProgress()
        self.ckpt: Path | None = None
        self.saved: dict[str, Any] | None = None  # the checkpoint's run state when resuming
        self._closing = AsyncExitStack()
        self._t0 = time.perf_counter()

    def _tick(self, t: Trajectory) -> None:
        if t.parent_id is None:  # a finished sample, whatever its status; forked branches are extra
            self.prog.advance("rollouts")

    @property
    def reference_dir(self) -> Path:
        """The warm-started weights: the KL anchor, and with LoRA the frozen base a resume rebuilds on."""
        return self.cfg.workdir / "checkpoints" / "reference"

    async def setup(self) -> None:
        """Find the checkpoint to resume, gather and gate the tasks, open the store, sinks, sandbox
        pools, judge, schedulers and executor. Admission is decided before a store or run record is made."""
        from sparring.train.checkpoint import latest_checkpoint, load_state

        cfg, log = self.cfg, self.log
        with contextlib.suppress(Exception):  # transformers' weight-loading progress bars only clutter stderr
            import transformers

            transformers.utils.logging.disable_progress_bar()
        self._t0 = time.perf_counter()
        self.ckpt = latest_checkpoint(cfg.workdir) if self.resuming else None
        if self.resuming and self.ckpt is None:
            raise ConfigError(
                f"--resume: no checkpoint in {cfg.workdir / 'checkpoints'}; start without --resume"
            )
        cfg.workdir.mkdir(parents=True, exist_ok=True)
        self.saved = load_state(self.ckpt) if self.ckpt is not None else None
        if self.saved is not None and self.ckpt is not None:
            check_same_config(self.saved, cfg, self.ckpt)
        self.run_id = (
            self.saved["run_id"]
            if self.saved
            else f"run-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
        )
        self.result = RunResult(run_id=self.run_id)
        run_tasks = collect_tasks(cfg, log)
        self.backend = make_backend(cfg.backend)  # each task's spec names its layer: agent and judge run it
        self._closing.push_async_callback(self.backend.aclose)
        run_tasks = await gate_tasks(
            cfg, run_tasks, PytestJudge(self.backend, limits=cfg.sandbox_limits), log, self.result.admission
        )
        store_path = cfg.workdir / "store.db"
        self.result.store = str(store_path)
        self.store = SQLiteStore(store_path)
        self._closing.callback(self.store.close)
        if self.saved is None:
            self.store.start_run(self.run_id, cfg.model_dump(mode="json"))
        else:
            # Rollouts of the iteration(s) after the checkpoint (a Ctrl-C or a crash stopped them) are
            # redone from here: drop them, or the run would count them twice.
            assert self.ckpt is not None
            if dropped := self.store.drop_run_after(self.run_id, interrupted_after(self.saved, self.ckpt)):
                log(
                    f"dropped {dropped} rollout(s) stored after {self.ckpt.name} by the interrupted run; they are redone"
                )
        self.sink = make_sinks(cfg.monitor.exporters, cfg.workdir, self.run_id, cfg.model_dump(mode="json"))
        self._closing.callback(self.sink.close)
        self.pool = SandboxPool(self.backend, max_idle=cfg.concurrency, limits=cfg.sandbox_limits)
        self._closing.push_async_callback(self.pool.close)
        # Warm judge sandboxes, launcher prestarted (judge_pool_for): bounded, so idle ones of many tasks stay few.
        judge_pool = judge_pool_for(self.backend, cfg.concurrency)
        self._closing.push_async_callback(judge_pool.close)
        self.judge = PytestJudge(self.backend, limits=cfg.sandbox_limits, pool=judge_pool)
        self.train_tasks, self.heldout_tasks = run_tasks.train, run_tasks.heldout
        self._make_schedulers()

    def _make_schedulers(self) -> None:
        from sparring.rollout.branching import check_branchable, parse_branch_plan

        cfg = self.cfg
        plan = parse_branch_plan(cfg.branch_at, cfg.branches) if cfg.credit == "tree" else None
        if plan is not None:
            check_branchable(self.train_tasks)
        limits = StageLimits(policy_turn_s=cfg.model.turn_timeout_s)  # the policy's own time per turn
        self.sched = RolloutScheduler(
            self.pool, self.judge, self.store, concurrency=cfg.concurrency, max_steps=cfg.max_steps,
            on_done=self._tick, limits=limits, branch=plan,
        )  # fmt: skip
        self.eval_sched = RolloutScheduler(
            self.pool, self.judge, self.store, concurrency=cfg.concurrency, max_steps=cfg.heldout_max_steps,
            on_done=self._tick, limits=limits,
        )  # fmt: skip
        self.executor = make_rollout_executor(
            cfg, self.sched
        )  # where every scheduler of the run plays its samples
        self._closing.push_async_callback(self.executor.aclose)
        self.executor.attach(self.eval_sched)

    async def warm_start(self) -> None:
        """Build or load the policy; on a fresh run with ``sft_steps``, first roll the teacher out on the
        training tasks (real sandboxes and judge, stored) and then fine-tune on its kept turns."""
        from sparring.policy.hf import HFPolicy
        from sparring.train.grpo import SFTTrainer, sft_examples

        cfg, res, m = self.cfg, self.result, self.cfg.model
        examples: list[tuple[str, str]] = []
        demo_texts: list[str] = []
        kept: list[Trajectory] = []
        tools: list[dict[str, Any]] = []
        if self.saved is None and cfg.sft_steps > 0:
            self.log("warm start: teacher rollouts")
            teacher = make_teacher(cfg)
            oracle_sched = RolloutScheduler(
                self.pool, self.judge, self.store, concurrency=cfg.concurrency, on_done=self._tick
            )  # the tasks' own budgets
            self.executor.attach(oracle_sched)
            demo = await evaluate(
                oracle_sched, self.train_tasks, teacher, self.run_id + "-teacher", cfg.seed,
                cfg.warm_start.samples, self.prog, "warm start: teacher rollouts",
            )  # fmt: skip
            first = self.train_tasks[0].spec
            tools = tool_schemas(list(first.tools), first.custom_tools)
            kept = [
                t for t in demo.trajectories if t.trainable and (t.passed or not cfg.warm_start.passed_only)
            ]
            # In Sparring's template: what a model built here learns its tokenizer from (the model does
            # not exist yet). SFT itself trains on the model's own template's pairs, below.
            examples = [ex for t in kept for ex in sft_examples(t, tools)]
            if not examples:
                raise JudgeError(
                    "warm start: no usable teacher trajectory (the teacher solved none of the training tasks); check the tasks with `sparring tasks check`"
                )
            demo_texts = [p + c for p, c in examples[:200]]
            res.sft = {"teacher": teacher.name, "teacher_pass_rate": demo.pass_rate, "oracle_pass_rate": demo.pass_rate,
                       "trajectories": len(kept), "examples": len(examples), "steps": cfg.sft_steps}  # fmt: skip
        self.model_dir = (
            Path(self.saved["model"])
            if self.saved
            else await asyncio.to_thread(
                prepare_model, cfg, self.train_tasks, self.log, demo_texts, self.prog
            )
        )
        res.model = str(self.model_dir)
        self.policy = HFPolicy(
            self.model_dir, max_new_tokens=m.max_new_tokens, max_prompt_tokens=m.max_prompt_tokens,
            temperature=m.temperature, top_p=m.top_p, seed=cfg.seed, max_batch=m.max_batch,
            tool_format=m.tool_format,
        )  # fmt: skip
        if examples:
            # in the model's own chat template (a hub model's, or Sparring's: the same text as above)
            examples = [ex for t in kept for ex in self.policy.codec.sft_pairs(t.messages, tools)]
            res.sft["examples"] = len(examples)  # what SFT trains on (a template may leave turns out)
            if not examples:
                raise JudgeError(
                    f"warm start: the chat template of {self.model_dir} renders none of the teacher's "
                    "turns as a continuation of its prompt, so SFT has nothing to train on: set sft_steps=0 "
                    "or use a model whose template renders assistant turns"
                )
            self.log(f"warm start: SFT on {len(examples)} teacher turns")
            sft = SFTTrainer(self.policy, lr=cfg.sft_lr, micro_batch_tokens=cfg.grpo.micro_batch_tokens)
            rng = random.Random(cfg.seed)
            losses = []
            self.prog.start("sft", cfg.sft_steps, "warm start: SFT steps")
            for _ in range(cfg.sft_steps):
                batch = rng.sample(examples, min(cfg.sft_batch, len(examples)))
                losses.append(float((await asyncio.to_thread(sft.step, batch))["sft/loss"]))
                self.prog.advance("sft")
            self.prog.finish("sft")
            res.sft.update({"loss_first": losses[0], "loss_last": losses[-1]})

    async def prepare_training(self) -> None:
        """The curriculum, the reference weights (kept for the KL anchor or under LoRA), the LoRA
        adapters, the GRPO trainer, the weight push and the monitors."""
        from sparring.train.checkpoint import load_weights
        from sparring.train.grpo import GRPOTrainer
        from sparring.train.lora import apply_lora

        cfg, m = self.cfg, self.cfg.model
        self.curriculum = BetaCurriculum(self.train_tasks, seed=cfg.seed, **cfg.curriculum.model_dump())
        ref_dir = self.reference_dir
        keep_ref = cfg.checkpoint_every and (cfg.grpo.kl_coef > 0 or m.lora is not None)
        if self.saved is None and keep_ref:
            await asyncio.to_thread(self.policy.model.save_pretrained, str(ref_dir), safe_serialization=True)
        if m.lora is not None:
            if self.saved is not None:  # the base under the adapters is the warm start, not the raw model
                load_weights(ref_dir.parent, self.policy, sub=ref_dir.name)
            apply_lora(self.policy, m.lora, seed=cfg.seed)
        self.trainer = GRPOTrainer(self.policy, cfg.grpo)
        self.sync = make_weight_sync(cfg)
        self.drift = DriftMonitor(cfg.monitor.drift_reference, cfg.monitor.drift_window)
        self.rules = AlertRules()
        self.lag = BatchLag(cfg.grpo.staleness)  # sampled batches waiting for their update (staleness k)

    async def resume(self) -> int:
        """Load the checkpoint's weights, optimizer and run state into the built parts; returns the
        first iteration still to run."""
        from sparring.policy.lora_files import load_adapter
        from sparring.train.checkpoint import load_trainer, load_weights

        saved, ckpt, res = self.saved, self.ckpt, self.result
        assert saved is not None and ckpt is not None, "resume() needs setup() with resume=True"
        self.log(f"resuming from {ckpt}")
        res.trained_model = str(ckpt / "model")
        if self.cfg.model.lora is not None:
            load_adapter(self.policy.model, ckpt / "model")
        else:
            load_weights(ckpt, self.policy)
        ref_dir = self.reference_dir
        if self.trainer.ref_model is not None:
            load_weights(ref_dir.parent, _ModelHolder(self.trainer.ref_model), sub=ref_dir.name)
        load_trainer(ckpt, self.trainer.optimizer)
        self.policy._version = int(saved["policy_version"])
        self.curriculum.load_state_dict(saved["curriculum"])
        self.drift.load_state_dict(saved["drift"])
        self.rules.load_state_dict(saved["alerts"])
        await self.lag.restore([[Trajectory.model_validate(t) for t in b] for b in saved["pending"]])
        res.skill = saved.get("skill", {})
        res.heldout_curve = saved.get("heldout_curve", [])
        res.iterations, res.heldout, res.sft, res.alerts = (
            saved["iterations"],
            saved["heldout"],
            saved["sft"],
            saved["alerts_raised"],
        )
        return int(saved["iteration"]) + 1

    async def evaluate(self, phase: str) -> None:
        """The held-out evaluation ``before_rl``, ``after_rl``, or ``during`` RL (``eval_every``: the
        weights after the iterations run so far): into the result and the metrics sinks. With
        ``eval_every`` each one is also a point of ``heldout_curve``."""
        cfg, res = self.cfg, self.result
        done = len(res.iterations)
        if phase == "during":
            suffix, seed_offset, when = f"-heldout-iter{done}", _DURING_SEED, f"after iteration {done}"
        else:
            suffix, seed_offset, when = _PHASES[phase]
        self.log(f"held-out evaluation {when}")
        summary = await evaluate(
            self.eval_sched, self.heldout_tasks, self.policy, self.run_id + suffix, cfg.seed + seed_offset,
            cfg.heldout_samples, self.prog, f"held-out evaluation {when}",
        )  # fmt: skip
        row = heldout_metrics(phase, summary)
        if phase != "during":
            res.heldout[phase] = summary.pass_rate
            res.heldout[f"{phase}_reward"] = summary.reward_mean
            if (sk := skill_of(cfg, summary.trajectories)) is not None:
                res.skill[phase] = sk
                row.update(skill_metrics(f"eval/heldout/{phase}/skill", sk))
        if cfg.eval_every:
            res.heldout_curve.append(curve_point(res.iterations, summary.pass_rate, summary.reward_mean))
        self.sink.log(done if phase != "before_rl" else 0, row)

    async def _push_weights(self) -> float:
        """Push the policy's weights to the inference server; the seconds it took, rounded."""
        assert self.sync is not None, "no weight_sync configured"
        t_sync = time.perf_counter()
        await asyncio.to_thread(self.sync.push, self.policy)
        self.result.weight_syncs += 1
        return round(time.perf_counter() - t_sync, 3)

    async def _sample_and_update(
        self, it: int
    ) -> tuple[list[Trajectory], float, int, dict[str, Any], bool, float]:
        """Sample iteration ``it``'s batch and run the update that is due: the batch sampled ``staleness``
        iterations ago (asynchronous: while this one is sampled) or this one. Returns the batch, its
        sampling seconds, replaced groups, the metrics so far, whether an update ran and its seconds."""
        cfg, policy, trainer, lag = self.cfg, self.policy, self.trainer, self.lag
        max_new_tokens = cfg.model.max_new_tokens
        if cfg.async_rollouts and lag.staleness > 0:
            # Asynchronous: the update on the batch sampled k iterations ago runs while this
            # iteration's batch is sampled; the queue's staleness check bounds how old it is.
            sampled_at = policy.version
            ready = await lag.ready(policy.version)
            sampling = asyncio.ensure_future(
                sample_batch(cfg, self.curriculum, self.sched, policy, self.run_id, it, self.prog)
            )
            t_up = time.perf_counter()
            try:
                update = await asyncio.to_thread(trainer.step, ready) if ready is not None else {}
                update_s = time.perf_counter() - t_up if ready is not None else 0.0
                if self.sync is not None and update.get("train/skipped") == 0.0:
                    # the new weights go to the inference side while the batch is still sampled
                    update["sync/seconds"] = await self._push_weights()
            except BaseException:
                sampling.cancel()
                raise
            trajs, seconds, replaced = await sampling
            await lag.add(trajs)
            metrics = iteration_metrics(trajs, seconds, sampled_at, max_new_tokens)
        else:
            trajs, seconds, replaced = await sample_batch(
                cfg, self.curriculum, self.sched, policy, self.run_id, it, self.prog
            )
            metrics = iteration_metrics(trajs, seconds, policy.version, max_new_tokens)
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
        return trajs, seconds, replaced, metrics, ready is not None, update_s

    async def iteration(self, it: int) -> dict[str, Any]:
        """One RL iteration: sample, update, monitor, log; returns its row (also in the result)."""
        cfg, res = self.cfg, self.result
        t_it = time.perf_counter()
        trajs, seconds, replaced, metrics, updated, update_s = await self._sample_and_update(it)
        if updated:
            metrics["timing_s/update"] = update_s
        metrics["actor/lr"] = float(self.trainer.optimizer.param_groups[0]["lr"])
        # the trainer's idle time: the part of the iteration it was not updating
        metrics["train/update_s"] = round(update_s, 4)
        metrics["train/idle_s"] = round(time.perf_counter() - t_it - update_s, 4)
        metrics.update(self.curriculum.metrics())
        for t in trajs:
            if t.trainable and t.reward is not None:
                self.drift.add(f"{t.family}@{t.judge_version}", [t.reward])
        drifts = self.drift.check()
        for d in drifts:  # one key per family@judge; '/' would nest the metric name
            metrics[f"monitor/drift_psi/{d.key.replace('/', ':')}"] = d.psi
        alerts = self.rules.check(it, metrics, drifts)
        metrics["monitor/alerts"] = len(alerts)
        for a in alerts:
            self.log(f"ALERT {a.rule}: {a.detail}")
        res.alerts += [a.to_json() for a in alerts]
        row = {
            "iteration": it,
            "reward_mean": metrics["rollout/reward_mean"],
            "pass_rate": metrics["rollout/pass_rate"],
            "statuses": metrics["rollout/statuses"],
            "rollouts": len(trajs),
            "sampled_tool_calls": metrics["rollout/sampled_tool_calls"],
            "throughput_per_min": metrics["rollout/throughput_per_min"],
            "seconds": seconds,
            "policy_version": self.policy.version,
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
        elif self.sync is not None and metrics.get("train/skipped") == 0.0:
            # Before the checkpoint: if the server cannot be reached the run stops with a one-line
            # error, and --resume redoes this iteration (sampling and update are deterministic).
            row["weight_sync_s"] = metrics["sync/seconds"] = await self._push_weights()
        metrics["timing_s/step"] = time.perf_counter() - t_it
        self.sink.log(it, with_aliases(metrics))
        res.iterations.append(row)
        if self.on_iteration:
            self.on_iteration(row)
        self.prog.advance("rl")
        return row

    def checkpoint_due(self, it: int) -> bool:
        every = self.cfg.checkpoint_every
        return bool(every) and ((it + 1) % every == 0 or it + 1 == self.cfg.iterations)

    async def checkpoint(self, it: int) -> Path:
        """Write the checkpoint of iteration ``it``: weights, optimizer, RNG and the run state."""
        from sparring.train.checkpoint import save_checkpoint

        res = self.result
        state = run_state(
            self.cfg, self.run_id, it, self.model_dir, policy_version=self.policy.version,
            curriculum=self.curriculum.state_dict(), drift=self.drift.state_dict(), alerts=self.rules.state_dict(),
            pending=self.lag.pending(), iterations=res.iterations, heldout=res.heldout, sft=res.sft,
            alerts_raised=res.alerts, skill=res.skill, heldout_curve=res.heldout_curve,
        )  # fmt: skip
        ck = await asyncio.to_thread(
            save_checkpoint, self.cfg.workdir, it, self.policy, self.trainer.optimizer, state
        )
        res.trained_model = str(ck / "model")
        return ck

    async def train(self) -> None:
        """The RL iterations still to run, each checkpointed when due. The control run (``rl: false``)
        changes no weight, so it runs none: its iterations would only burn rollouts."""
        start = await self.resume() if self.saved is not None else None
        if start is None:
            await self.evaluate("before_rl")
            start = 0
        if self.sync is not None and self.saved is None:  # the server starts from the warm-started weights
            await self._push_weights()
        end = self.cfg.iterations if self.cfg.rl else 0
        if end > start:
            self.prog.start("rl", end - start, "RL iterations")
        for it in range(start, end):
            await self.iteration(it)
            if self.cfg.eval_every and (it + 1) % self.cfg.eval_every == 0 and it + 1 < end:
                await self.evaluate("during")  # before the checkpoint, which keeps the curve
            if self.checkpoint_due(it):
                await self.checkpoint(it)
        self.prog.finish("rl")

    async def close(self) -> None:
        """Release what setup() opened (executor, pools, sandbox backend, sinks, store); safe after a failure."""
        await self._closing.aclose()

    async def run(self) -> RunResult:
        """The whole recipe; the run's record in the store gets the result."""
        try:
            await self.setup()
            await self.warm_start()
            await self.prepare_training()
            await self.train()
            await self.evaluate("after_rl")
            self.result.seconds = time.perf_counter() - self._t0
            self.store.finish_run(self.run_id, self.result.to_json())
            return self.result
        finally:
            await self.close()


async def run_rl(
    cfg: RLConfig,
    log: Log = lambda s: None,
    on_iteration: Callable[[dict[str, Any]], None] | None = None,
    *,
    resume: bool = False,
    progress: Progress | None = None,
) -> RunResult:
    """The whole recipe (:meth:`RLRecipe.run`); with ``resume`` it continues from the newest checkpoint
    in the workdir. ``progress`` follows SFT steps (``sft``), RL iterations (``rl``) and each batch of
    rollouts (``rollouts``: teacher, training and held-out)."""
    return await RLRecipe(cfg, log, on_iteration, resume=resume, progress=progress).run()
