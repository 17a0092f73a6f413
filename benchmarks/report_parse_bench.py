"""Host CPU to read a forged judge report line (issue 33); prints one JSON object.

python benchmarks/report_parse_bench.py [--repeats 75000]

A line repeating one site id N times (75,000: about 0.9 MB, what a candidate's process can write to
the report channel) and one a quarter as long: the CPU seconds of each parse and their ratio (about 4
for a linear parse; the quadratic merge it replaced took 5-6 s on the long one, 16 times the short one's).
"""

from __future__ import annotations

import argparse
import json
import time

from sparring.judge.report import MARK, parse_report


def forged(n: int) -> str:
    obs = [[0, 1, ["1"], 0]] * n
    line = {"kind": "test", "id": "hidden/test_a.py::test_a", "outcome": "passed", "obs": obs}
    return MARK + " " + json.dumps(line, separators=(",", ":"))


def cpu_s(text: str, tries: int = 3) -> float:
    best = float("inf")
    for _ in range(tries):
        t = time.process_time()
        parse_report(text)
        best = min(best, time.process_time() - t)
    return best


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=75_000)
    a = ap.parse_args()
    small, large = forged(a.repeats // 4), forged(a.repeats)
    s, big = cpu_s(small), cpu_s(large)
    print(
        json.dumps(
            {
                "line_bytes": len(large),
                "parse_cpu_s": round(big, 4),
                "line_bytes_quarter": len(small),
                "parse_cpu_s_quarter": round(s, 4),
                "ratio": round(big / s, 2) if s else None,
            }
        )
    )
