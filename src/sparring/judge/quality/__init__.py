"""Keeping the judge honest, on the HOST: its own regression, red-team and throughput checks.

- :mod:`.golden` (with ``golden.json``) and :mod:`.golden_process` (with ``golden_process.json``):
  the frozen golden set of workspaces and trajectories with the verdicts they must keep;
- :mod:`.regress`: replaying the golden set (``sparring judge regress``);
- :mod:`.redteam`: the red team's expectations of the judge and payloads aimed at its verdict machinery;
- :mod:`.canary`: impossible task variants mixed into batches to measure cheating;
- :mod:`.review`: the queue of high-risk judgements for a person to label;
- :mod:`.bench`: the judge's overhead and throughput (``sparring judge bench``, ``benchmarks/judge_bench.py``).
"""
