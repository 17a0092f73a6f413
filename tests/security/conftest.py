"""Fixtures for the security suite: a real local backend, host canaries, host processes to attack.

Every attack runs inside a real sandbox. The payloads are written so that even
a sandbox that failed could not harm the host: bounded loops, short timeouts,
scratch paths in pytest's tmp dirs only, no kill(-1), no walk from /.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from sec_support import CANARY_TEXT


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is not installed: run `make setup` (security tests need real sandboxes)")
    from sparring.sandbox.local.backend import LocalBackend

    return LocalBackend(root=tmp_path_factory.mktemp("sandboxes"))


@pytest.fixture
def canary(tmp_path) -> Path:
    """A host file outside every mount; its content must never be read or changed from inside."""
    d = tmp_path / "host-secrets"
    d.mkdir()
    f = d / "canary.txt"
    f.write_text(CANARY_TEXT + "\n")
    return f


@pytest.fixture
def host_sleeper() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """A host process with a unique marker in its argv, killed at the end of the test."""
    marker = f"sparring-host-victim-{uuid.uuid4().hex}"
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(3600)", marker]
    )  # outlives any slow test
    try:
        yield proc, marker
    finally:
        proc.kill()
        proc.wait()
