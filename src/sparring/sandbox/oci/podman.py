"""Host side: the podman command lines of the OCI backend (run, remove), and what they answer.

One sandbox is one ``podman run -d`` (:func:`run_argv`): no network, the host's cgroup namespace, a
read-only root, the sealed init and shell (sealed.py), no capabilities, no new privileges, the backend's
seccomp profile (profile.py), a cgroup parent of the sandbox's own, and the sandbox's directories bound
in (backend.py draws them). Every container carries labels naming its owner (:data:`LABEL`), id and
directory, so a later backend can remove what a dead owner left (``OCIBackend.reap_stale``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

from sparring.errors import SandboxError
from sparring.sandbox.base import WORKSPACE, EnvironmentRef, SandboxSpec
from sparring.sandbox.environment import SandboxEnvironment
from sparring.sandbox.oci.image import first_line, ulimit_flags
from sparring.sandbox.oci.support import CG_PREFIX, HOSTNAME, SERVER_SHELL

if TYPE_CHECKING:
    from sparring.sandbox.oci.backend import OCIBackend

LABEL = "sparring.oci.owner"


def environment_mounts(ref: EnvironmentRef | None) -> list[str]:
    """podman flags that make the spec's Python layer runnable in the default busybox image (which has no
    C library): the host's /usr and library directories, the base interpreter's prefix and the layer,
    read-only at their own paths. A task's own image gets none of them: its system and Python are its own
    (as on the local backend, whose image sandboxes bind nothing of the host's)."""
    if ref is None:
        return []
    if not (Path(ref.path) / "bin" / "python").exists():
        raise SandboxError(
            f"environment layer {ref.path} has no bin/python: rebuild it (sparring tasks check builds it)"
        )
    out = ["-v", "/usr:/usr:ro"]
    for name in ("lib", "lib64", "lib32", "libx32"):
        p = Path("/") / name
        if p.exists():
            out += ["-v", f"{p.resolve()}:/{name}:ro"]
    for p in SandboxEnvironment.of_layer(Path(ref.path)).ro_paths:
        out += ["-v", f"{Path(p).resolve()}:{p}:ro"]
    return out


def run_argv(
    backend: OCIBackend, sid: str, sdir: Path, exec_cg: Path, spec: SandboxSpec, image: str
) -> list[str]:
    """``podman run -d`` of sandbox ``sid``: its directory ``sdir`` (ws/ at /workspace, ctl/ at /.sparring),
    the commands' cgroups ``exec_cg`` at /.sparring-cg, the spec's mounts and limits, the exec server.
    ``image``: what podman runs (a task's image by podman's id of it); the spec's Python layer only
    where the spec names no image of its own."""
    ws, ctl = sdir / "ws", sdir / "ctl"
    argv = backend.podman + [
        "run", "-d", "--pull", "never", "--name", f"sparring-oci-{sid}",
        "--label", f"{LABEL}={os.getpid()}", "--label", f"sparring.oci.id={sid}",
        "--label", f"sparring.oci.dir={sdir}",
        "--network", "none", "--cgroupns", "host", "--read-only", "--init", "--init-path", str(backend.sealed_init), "--log-driver", "none", "--hostname", HOSTNAME,
        "--user", "0:0", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
        "--security-opt", f"seccomp={backend.seccomp_profile}",
        "--cgroup-parent", f"/{CG_PREFIX}{sid}",
        "-v", f"{ws}:{WORKSPACE}:rslave", "-v", f"{ctl}:/.sparring",
        "-v", f"{exec_cg}:/.sparring-cg", "-v", f"{backend.sealed_sh}:{SERVER_SHELL}:ro",
        *ulimit_flags(),
    ]  # fmt: skip
    if spec.workspace_alias is not None:  # the image's own path of it (/testbed): one more slave of ws/
        argv += ["-v", f"{ws}:{spec.workspace_alias}:rslave"]
    if spec.image is None:  # a task's image is its whole environment: nothing of the host's bound in
        argv += environment_mounts(spec.environment)
    for dest, src in sorted(spec.extra_ro.items()):
        argv += ["-v", f"{Path(src).resolve()}:{dest}:ro"]
    for dest, src in sorted(spec.extra_rw.items()):
        argv += ["-v", f"{Path(src).resolve()}:{dest}"]
    if spec.memory_mb is not None:
        argv += ["--memory", f"{spec.memory_mb}m", "--memory-swap", f"{spec.memory_mb}m"]
    if spec.pids is not None:
        argv += ["--pids-limit", str(spec.pids)]
    if spec.cpus is not None:
        argv += ["--cpus", f"{spec.cpus:g}"]
    return argv + [image, SERVER_SHELL, "/.sparring/server.sh"]


def start(argv: list[str], cwd: Path, image: str) -> str:
    """Run ``argv`` (:func:`run_argv`) in ``cwd``; the container id, or SandboxError saying why not."""
    # conmon inherits the working directory and drops an `oom` marker file there on OOM kills.
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd)
    if r.returncode != 0:
        msg = first_line(r.stderr)
        if "image not known" in msg or "manifest unknown" in msg or "unable to pull" in msg.lower():
            raise SandboxError(f"container image {image!r} not found locally: build or load it first")
        raise SandboxError(f"podman could not start the sandbox container: {msg}")
    return r.stdout.strip().splitlines()[-1]


def remove(podman: list[str], cid: str) -> None:
    """``podman rm -f`` at once (no grace period); a container already gone is no error."""
    subprocess.run(podman + ["rm", "-f", "-t", "0", cid], capture_output=True, timeout=60)
