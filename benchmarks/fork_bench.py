"""Fork cost per branch point; prints one JSON object.

python benchmarks/fork_bench.py [--n 10] [--branches 2] [--tmp-kb 256]

A branch point (issue 37, ``sparring rollout --branch-at T --branches K``) costs,
in the root's sandbox: a workspace snapshot and an archive of /tmp and home;
and per branch: a sandbox started from the snapshot and the archive unpacked.
The sandbox holds a small workspace edit and ``--tmp-kb`` of files in /tmp and
home. Medians and p90 over ``--n`` branch points, in ms; memory: the snapshot
layer's bytes on disk, the archive's bytes held on the host per branch point,
and this process's peak RSS growth over the run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import tempfile
import time
from pathlib import Path

from sparring.rollout.branching import capture_extras, restore_extras
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.local.backend import LocalBackend


def _q(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(q * len(xs)))], 2)


def _dir_bytes(p: Path) -> int:
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file() and not f.is_symlink())


async def bench(n: int, branches: int, tmp_kb: int) -> dict[str, object]:
    backend = LocalBackend()
    ws = Path(tempfile.mkdtemp(prefix="fork-bench-"))
    for i in range(20):
        (ws / f"m{i}.py").write_text(f"x = {i}\n" * 50)
    spec = SandboxSpec(workspace=str(ws))
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t: dict[str, list[float]] = {"snapshot": [], "archive": [], "fork_create": [], "unpack": [], "point": []}
    layer_bytes: list[int] = []
    archive_bytes: list[int] = []
    root = await backend.create(spec)
    try:
        for i in range(n):
            await root.exec(
                f"echo edit{i} >> m0.py && head -c {tmp_kb * 512} /dev/urandom > /tmp/blob{i} "
                f"&& head -c {tmp_kb * 512} /dev/urandom > ~/blob{i}",
                timeout=30,
            )
            t0 = time.perf_counter()
            sid = await root.snapshot()
            t1 = time.perf_counter()
            extras = await capture_extras(root)
            t2 = time.perf_counter()
            t["snapshot"].append((t1 - t0) * 1000)
            t["archive"].append((t2 - t1) * 1000)
            archive_bytes.append(len(extras))
            layers = backend.snapshots.get(sid, ())
            layer_bytes.append(_dir_bytes(layers[0]) if layers else 0)
            point = (t2 - t0) * 1000
            for _ in range(branches):
                t3 = time.perf_counter()
                sb = await backend.create(spec, snapshot=sid)
                t4 = time.perf_counter()
                await restore_extras(sb, extras)
                t5 = time.perf_counter()
                t["fork_create"].append((t4 - t3) * 1000)
                t["unpack"].append((t5 - t4) * 1000)
                point += (t5 - t3) * 1000
                check = await sb.exec(
                    f"test -s /tmp/blob{i} && test -s ~/blob{i} && grep -q edit{i} m0.py", timeout=30
                )
                assert check.exit_code == 0, "a fork lost the state it was forked from"
                await sb.close()
            t["point"].append(point)
    finally:
        await root.close()
        await backend.aclose()
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    out: dict[str, object] = {"n": n, "branches": branches, "tmp_kb": tmp_kb, "mode": backend.mode}
    for k, v in t.items():
        out[f"{k}_ms"] = _q(v, 0.5)
        out[f"{k}_p90_ms"] = _q(v, 0.9)
    out["per_branch_point_ms"] = out.pop("point_ms")
    out["per_branch_point_p90_ms"] = out.pop("point_p90_ms")
    out["snapshot_layer_bytes"] = int(statistics.median(layer_bytes))
    out["archive_bytes"] = int(statistics.median(archive_bytes))
    out["host_rss_growth_kb"] = rss1 - rss0
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10)
    ap.add_argument("--branches", type=int, default=2)
    ap.add_argument("--tmp-kb", type=int, default=256)
    a = ap.parse_args()
    print(json.dumps(asyncio.run(bench(a.n, a.branches, a.tmp_kb))))
