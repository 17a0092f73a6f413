"""Trainer benchmark: GRPO update throughput (tokens/s) on a tiny model, side by side with TRL's GRPO
loss on identical inputs (when trl is installed: pip install -e '.[bench]'); prints one JSON object.

    python benchmarks/train_bench.py [--groups 4] [--group-size 8] [--prompt-len 192] [--completion-len 32]
"""

from __future__ import annotations

import argparse
import json

from sparring.train.bench import run_train_bench

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=192)
    ap.add_argument("--completion-len", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=5)
    a = ap.parse_args()
    print(
        json.dumps(
            run_train_bench(
                a.groups, a.group_size, a.prompt_len, a.completion_len, a.hidden, a.layers, a.repeats
            )
        )
    )
