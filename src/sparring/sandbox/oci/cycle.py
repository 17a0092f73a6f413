"""The podman cycle benchmark: create + exec + close through podman, against which the local backend is compared."""

from __future__ import annotations

import asyncio
import statistics
import time

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.isolation.features import podman_argv
from sparring.sandbox.oci.backend import OCIBackend
from sparring.sandbox.oci.image import ensure_image, first_line, ulimit_flags


def _summary(samples: list[float], key: str) -> dict[str, float]:
    s = sorted(samples)
    p99 = s[min(len(s) - 1, max(0, int(round(0.99 * (len(s) - 1)))))]
    return {f"{key}_ms": round(statistics.median(s), 3), f"{key}_p99_ms": round(p99, 3)}


async def podman_cycle_ms(n: int = 5, image: str | None = None, mode: str = "run") -> dict[str, object]:
    """Median and p99 of ``n`` create + exec + close cycles through podman (``--network none``).

    ``mode="run"``: one ``podman run --rm IMAGE true`` per cycle, the cheapest podman
    lifecycle (the ratio against it is conservative). ``mode="sandbox"``: the OCI
    backend's own ``create()`` + ``exec(["true"])`` + ``close()``.
    """
    if n < 1:
        raise SandboxError("podman_cycle_ms needs n >= 1")
    img = image if image is not None else await asyncio.to_thread(ensure_image)
    samples: list[float] = []
    if mode == "run":
        argv = podman_argv() + [
            "run",
            "--rm",
            "--pull",
            "never",
            "--network",
            "none",
            "--log-driver",
            "none",
            *ulimit_flags(),
            img,
            "true",
        ]
        for _ in range(n):
            t0 = time.perf_counter()
            proc = await asyncio.create_subprocess_exec(
                *argv, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
            )
            _, err = await proc.communicate()
            if proc.returncode != 0:
                raise SandboxError(f"podman run failed: {first_line(err.decode(errors='replace'))}")
            samples.append((time.perf_counter() - t0) * 1000)
    elif mode == "sandbox":
        backend = OCIBackend(image=img)
        for _ in range(n):
            t0 = time.perf_counter()
            sb = await backend.create(SandboxSpec())
            try:
                r = await sb.exec(["true"])
            finally:
                await sb.close()
            if r.exit_code != 0:
                raise SandboxError(f"`true` failed in the OCI sandbox: {r.stderr.strip()[:200]}")
            samples.append((time.perf_counter() - t0) * 1000)
    else:
        raise SandboxError(f"unknown mode {mode!r}: use 'run' or 'sandbox'")
    out: dict[str, object] = {"n": n, "mode": mode, "image": img}
    out.update(_summary(samples, "podman_cycle"))
    return out
