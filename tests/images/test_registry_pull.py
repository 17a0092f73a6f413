"""End to end on real parts: a Debian (trixie) image built by mmdebstrap, pushed by skopeo to Debian's
docker-registry on loopback, pulled by `sparring image pull` by tag and by digest, and run by
`sparring sandbox exec --image`, which sees the image's /etc/os-release and Python, not the host's
(the host is bookworm with Python 3.11). The image is built once per recipe and cached."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from image_support import DEBIAN_SUITE, debian_layout, push, registry

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="image roots are bound by the host: overlay mode (root)"),
]
SPARRING = [sys.executable, "-m", "sparring.cli.main"]


def _run(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SPARRING, *args], capture_output=True, text=True, env=env, timeout=timeout)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """(registry host:port, the pushed reference) for the cached Debian image."""
    layout = debian_layout()
    work = tmp_path_factory.mktemp("registry")
    with registry(work) as host:
        ref = f"{host}/sparring-test/debian:{DEBIAN_SUITE}"
        push(layout, ref)
        yield host, ref


def test_pull_by_tag_and_digest_then_exec_sees_the_image(served, tmp_path):
    host, ref = served
    env = {
        **os.environ,
        "SPARRING_IMAGE_ROOT": str(tmp_path / "images"),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    r = _run(["image", "pull", ref, "--insecure", "--json"], env)
    assert r.returncode == 0, r.stderr
    pulled = json.loads(r.stdout)
    assert pulled["ref"] == ref and pulled["digest"].startswith("sha256:") and pulled["layers"] == 2
    assert pulled["size_bytes"] > 10 << 20

    pinned = f"{host}/sparring-test/debian@{pulled['digest']}"
    r = _run(["image", "pull", pinned, "--insecure", "--json"], env)  # by digest: every blob already here
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["digest"] == pulled["digest"]

    script = (
        ". /etc/os-release; echo $VERSION_CODENAME; python3 -c 'import sys; print(sys.version_info[:2])'; pwd"
    )
    r = _run(["sandbox", "exec", "--image", pinned, "--json", "--", "sh", "-c", script], env)
    assert r.returncode == 0, r.stderr
    lines = json.loads(r.stdout)["stdout"].split()
    assert lines[0] == DEBIAN_SUITE  # the host is bookworm
    host_codename = Path("/etc/os-release").read_text()
    assert f"VERSION_CODENAME={DEBIAN_SUITE}" not in host_codename  # control: the host differs
    assert "".join(lines[1:3]) == "(3,13)" and sys.version_info[:2] != (3, 13)
    assert lines[3] == "/opt"  # the image's WorkingDir

    r = _run(["image", "list", "--json"], env)
    listed = json.loads(r.stdout)["images"]
    assert [im["digest"] for im in listed] == [pulled["digest"]] and ref in listed[0]["refs"]


def test_insecure_to_a_remote_registry_and_a_missing_image_are_one_line_errors(served, tmp_path):
    host, _ = served
    env = {
        **os.environ,
        "SPARRING_IMAGE_ROOT": str(tmp_path / "images"),
        "PYTHONPATH": os.pathsep.join(sys.path),
    }
    r = _run(["image", "pull", "10.1.2.3:5000/x:1", "--insecure", "--json"], env)
    assert r.returncode != 0 and "only allowed to a loopback registry" in r.stderr
    r = _run(["image", "pull", f"{host}/sparring-test/absent:1", "--insecure", "--json"], env)
    assert r.returncode != 0 and "not found" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "images" / "images").iterdir())
