"""Images as sandbox roots, timed end to end; prints one JSON object.

python benchmarks/image_bench.py [--n 20] [--big] [--no-podman]

1. A Debian image built by mmdebstrap (cached by recipe; ``--big``: minbase with python3, pip and git,
   ~200 MB unpacked), served by Debian's docker-registry on loopback (pushed with skopeo).
2. ``pull_s``: the first pull into an empty store (download and verification), ``unpack_s``: its
   layers unpacked and flattened into the image's root (``pull_and_unpack_s`` both); ``writeback_s``:
   flushing what the unpack wrote to disk, before anything else is timed.
3. The sandbox lifecycle on that image (`sparring sandbox bench --image`, same keys: ``create_ms``
   from the pre-fork pool, ``cold_create_ms``, ``reset_ms``, ...), podman on the same image for
   ``podman_ratio``, and the memory of idle sandboxes (``prefork_idle_rss_per_sandbox_mb``,
   ``alive_rss_per_sandbox_mb``). ``host_*``: the same cold create and reset on the host's root in the
   same run, for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

for _d in ("tests", "tests/images"):  # image_support and the tests_support it imports
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / _d))

from image_support import DEBIAN_RECIPE, debian_layout, push, registry  # noqa: E402

from sparring.images.registry import pull  # noqa: E402
from sparring.images.store import ImageStore  # noqa: E402
from sparring.sandbox.bench import run_bench  # noqa: E402

BIG_RECIPE = {**DEBIAN_RECIPE, "variant": "minbase", "include": ["python3", "python3-pip", "git"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=2)
    ap.add_argument("--alive", type=int, default=20)
    ap.add_argument("--big", action="store_true", help="the ~200 MB image (minbase + python3, pip, git)")
    ap.add_argument("--no-podman", action="store_true")
    a = ap.parse_args()
    recipe = BIG_RECIPE if a.big else DEBIAN_RECIPE
    layout = debian_layout(recipe)
    out: dict[str, object] = {"recipe": recipe}
    with tempfile.TemporaryDirectory(prefix="sparring-image-bench-") as tmp:
        os.environ["SPARRING_IMAGE_ROOT"] = str(Path(tmp) / "images")
        with registry(Path(tmp) / "registry") as host:
            ref = f"{host}/bench/debian:{recipe['suite']}"
            push(layout, ref)
            store = ImageStore()
            marks: dict[str, float] = {}
            t0 = time.perf_counter()

            def status(msg: str) -> None:
                marks.setdefault("unpack_start", time.perf_counter())

            res = pull(store, ref, insecure=True, status=status)
            t1 = time.perf_counter()
            unpack_start = marks.get("unpack_start", t1)
            out.update(
                ref=ref, digest=res.digest, size_bytes=res.size_bytes, layers=res.layers,
                pull_s=round(unpack_start - t0, 3), unpack_s=round(t1 - unpack_start, 3),
                pull_and_unpack_s=round(t1 - t0, 3),
                unpacked_bytes=sum(
                    json.loads((store.layer_dir(lay.digest) / "meta.json").read_text())["bytes"]
                    for lay in res.record.layers
                ),
            )  # fmt: skip
            # The unpack left ~300 MB of dirty pages; their writeback would run beside the timed lifecycle
            # (on this ext4 /tmp it slowed the image's cycles by 1-2 ms against the host root's after it).
            t2 = time.perf_counter()
            os.sync()
            out["writeback_s"] = round(time.perf_counter() - t2, 3)
            bench = asyncio.run(
                run_bench(a.n, a.concurrency, 1000, 10, 20, a.alive, not a.no_podman, True, 2, res.digest)
            )
            out.update(bench)
            host = asyncio.run(run_bench(a.n, a.concurrency, 1000, 10, 20, 0, False, True, 2, None))
            keys = (
                "create_ms",
                "cold_create_ms",
                "reset_ms",
                "exec_ms",
                "alone_reset_ms",
                "alone_exec_ms",
                "cycle_ms",
            )
            out.update({f"host_{k}": host[k] for k in keys})
    print(json.dumps(out))


if __name__ == "__main__":
    main()
