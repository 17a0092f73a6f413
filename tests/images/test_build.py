"""`sparring image build` with buildah: a Dockerfile whose RUN step really runs (in a scratch image with
the host's static busybox, so no registry is needed), imported and run as a sandbox root."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BUSYBOX = shutil.which("busybox")
SPARRING = [sys.executable, "-m", "sparring.cli.main"]
DOCKERFILE = """FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "sh", "-c", "/bin/busybox --install -s /bin && mkdir -p /etc && echo ran-in-build > /etc/built"]
ENV BUILT=yes
WORKDIR /etc
"""


def _env(tmp_path: Path, path: str | None = None) -> dict[str, str]:
    env = {
        **os.environ,
        "SPARRING_IMAGE_ROOT": str(tmp_path / "images"),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    if path is not None:
        env["PATH"] = path
    return env


@pytest.mark.skipif(
    os.geteuid() != 0 or BUSYBOX is None, reason="buildah as root, busybox-static (make system)"
)
def test_build_runs_the_dockerfile_and_the_sandbox_sees_the_result(tmp_path):
    if shutil.which("buildah") is None:
        pytest.fail("buildah is missing: run `make system` (apt-get install buildah)")
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    assert BUSYBOX is not None
    shutil.copy(BUSYBOX, ctx / "busybox")
    (ctx / "Dockerfile").write_text(DOCKERFILE)
    env = _env(tmp_path)
    r = subprocess.run([*SPARRING, "image", "build", str(ctx), "--tag", "sparring-test/built:1", "--json"],
                       capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    built = json.loads(r.stdout)
    assert built["digest"].startswith("sha256:")
    r = subprocess.run([*SPARRING, "sandbox", "exec", "--image", built["digest"], "--json", "--",
                        "sh", "-c", "pwd; cat /etc/built; echo $BUILT"],
                       capture_output=True, text=True, env=env, timeout=120)  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["stdout"].split() == ["/etc", "ran-in-build", "yes"]


def test_build_without_buildah_says_what_to_install(tmp_path):
    ctx = tmp_path / "ctx"
    ctx.mkdir()
    (ctx / "Dockerfile").write_text("FROM scratch\n")
    empty = tmp_path / "bin"
    empty.mkdir()
    r = subprocess.run([*SPARRING, "image", "build", str(ctx), "--tag", "x/y:1"],
                       capture_output=True, text=True, env=_env(tmp_path, str(empty)), timeout=60)  # fmt: skip
    assert r.returncode != 0
    assert r.stderr.strip().splitlines() == [
        "error: image build needs buildah: install buildah (apt-get install buildah)"
    ]


def test_the_bases_a_dockerfile_pulls_and_which_go_over_plain_http():
    from sparring.images.builder import from_bases, loopback_only

    df = (
        "# syntax=docker/dockerfile:1\nFROM --platform=linux/amd64 127.0.0.1:5000/base/debian:trixie AS build\n"
        "RUN make\nFROM build AS test\nfrom scratch\nFROM localhost:5001/x/y@sha256:" + "a" * 64 + "\n"
    )
    assert from_bases(df) == ["127.0.0.1:5000/base/debian:trixie", "localhost:5001/x/y@sha256:" + "a" * 64]
    assert loopback_only(from_bases(df))
    for remote in ("python:3.11-slim", "ubuntu", "ghcr.io/org/img:1", "10.0.0.5:5000/x:1"):
        assert not loopback_only([*from_bases(df), remote]), remote  # one remote base: TLS for all
    assert not loopback_only([])  # FROM scratch only: nothing to pull, nothing insecure
