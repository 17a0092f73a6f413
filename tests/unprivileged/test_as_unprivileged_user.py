"""The sandbox, judge and rollout containment tests, re-run as an unprivileged user.

A cluster user has no root: the local backend falls back to copy-mode workspaces, rlimits instead
of cgroups, and bubblewrap makes the user namespace itself. ``make test`` runs as root, so without
this test those paths would run only when a user hits them. Here the selected test files run again
under ``runuser -u sparring-test`` (the user ``make setup`` creates) from a copy of the tree that
user can read, and must pass: the same containment assertions, on the fallbacks. ``sparring doctor
--json`` runs as that user too and must report the fallbacks the backend takes.

Where the interpreter lives below a directory the user cannot enter (a pyenv under /root), the run
happens in a private mount namespace in which a read-only bind of the interpreter's prefix sits on
an otherwise empty tmpfs over that directory: the user sees the interpreter and nothing else of it.
"""

from __future__ import annotations

import json
import os
import pwd
import shlex
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
USER = "sparring-test"
# The containment tests of the rooms a cluster user runs: sandbox, judge, rollout (and the fallback
# tests of this directory). Chosen to stay under ~3 minutes on 2 cores.
FILES = (
    "tests/security",
    "tests/sandbox/test_local_sandbox.py",
    "tests/sandbox/test_long_lived_sandbox.py",
    "tests/judge/test_fail_closed.py",
    "tests/judge/test_verdict_outside.py",
    "tests/rollout/test_rollout.py",
    "tests/unprivileged/test_fallback_paths.py",
    "tests/unprivileged/test_doctor_report.py",
)
# test id -> why it cannot hold without root. Each must still FAIL as the user (an entry
# that starts passing is reported, so the list only shrinks).
KNOWN_UNPRIVILEGED_GAPS: dict[str, str] = {}

pytestmark = pytest.mark.slow


def _blocked_ancestor(path: Path, uid: int) -> Path | None:
    """The highest directory above ``path`` that ``uid`` (not its owner, no group share) cannot enter."""
    for p in reversed(path.parents):
        st = p.stat()
        if st.st_uid != uid and not st.st_mode & 0o001:
            return p
    return None


@pytest.fixture(scope="module")
def unpriv() -> Iterator[dict[str, object]]:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: the whole suite runs as this user")
    try:
        user = pwd.getpwnam(USER)
    except KeyError:
        pytest.fail(f"user {USER} is missing: run `make setup` as root (it creates it)")
    # Not under /tmp: the user's environment-layer cache (in $HOME) would then be bound into sandboxes
    # under /tmp, where the judge's scavenger test reads every file and finds library sources.
    base = Path(
        tempfile.mkdtemp(prefix="sparring-unpriv-", dir="/var/tmp" if Path("/var/tmp").is_dir() else None)
    )
    os.chmod(base, 0o755)
    try:
        tree = base / "tree"
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")
        for part in ("src", "tests"):
            shutil.copytree(ROOT / part, tree / part, ignore=ignore)
        shutil.copy2(ROOT / "pyproject.toml", tree / "pyproject.toml")
        home = base / "home"
        home.mkdir()
        os.chown(home, user.pw_uid, user.pw_gid)
        subprocess.run(["chmod", "-R", "a+rX", str(tree)], check=True)
        # The user's environment layers, kept between runs (content-addressed): not rebuilt every CI run.
        envs = Path(f"/var/tmp/sparring-envs-{user.pw_uid}")
        if envs.is_symlink() or (envs.exists() and envs.stat().st_uid != user.pw_uid):
            shutil.rmtree(envs) if envs.is_dir() and not envs.is_symlink() else envs.unlink()
        envs.mkdir(mode=0o700, exist_ok=True)
        os.chown(envs, user.pw_uid, user.pw_gid)
        prefix = Path(sys.base_prefix).resolve()
        blocked = _blocked_ancestor(prefix / "bin", user.pw_uid)
        stage = base / "prefix"
        yield {"base": base, "tree": tree, "home": home, "prefix": prefix, "blocked": blocked, "stage": stage,
               "envs": envs}  # fmt: skip
    finally:
        shutil.rmtree(base, ignore_errors=True)


def as_user(ctx: dict[str, object], argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` as the test user with this interpreter, the copied tree first on sys.path."""
    tree, home = ctx["tree"], ctx["home"]
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONPATH": f"{tree}/src",
        "PYTHONDONTWRITEBYTECODE": "1",
        "SPARRING_ENV_CACHE": str(ctx["envs"]),
    }
    cmd = ["runuser", "-u", USER, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()), *argv]
    blocked = ctx["blocked"]
    if blocked is not None:  # expose only the interpreter's prefix, in a mount namespace of this run alone
        prefix, stage = ctx["prefix"], ctx["stage"]
        script = (
            f"set -e; mkdir -p {stage}; mount --bind {prefix} {stage}; "
            f"mount -t tmpfs -o mode=0755,size=1m tmpfs {blocked}; mkdir -p {prefix}; "
            f"mount --bind {stage} {prefix}; mount -o remount,bind,ro {prefix}; "
            f"exec {shlex.join(cmd)}"
        )
        cmd = ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script]
    return subprocess.run(cmd, cwd=str(tree), capture_output=True, text=True, timeout=timeout)


def test_doctor_as_unprivileged_user_reports_the_fallbacks(unpriv):
    r = as_user(unpriv, [sys.executable, "-m", "sparring.cli.main", "doctor", "--json"], timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    rep = json.loads(r.stdout)
    by = {c["name"]: c for c in rep["checks"]}
    assert rep["schema"] == "sparring.doctor/1" and rep["user"]["name"] == USER
    assert by["user namespaces"]["status"] == "ok"  # bubblewrap makes the namespace as the user
    assert by["overlayfs"]["status"] == "degraded" and "copy-mode" in by["overlayfs"]["fallback"]
    assert by["seccomp"]["status"] == "ok"
    cg = by["cgroups"]
    assert (cg["status"] == "ok") == (cg["fallback"] is None)  # rlimits exactly when not delegated
    assert by["podman/runc (OCI backend)"]["status"] == "missing"  # it needs root


def test_containment_tests_pass_as_unprivileged_user(unpriv):
    xml = unpriv["base"] / "junit.xml"  # type: ignore[operator]
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
            f"--junitxml={xml}", *FILES]  # fmt: skip
    os.chmod(unpriv["base"], 0o777)  # type: ignore[arg-type]  # the junit report is written there
    try:
        r = as_user(unpriv, argv, timeout=540)
    finally:
        os.chmod(unpriv["base"], 0o755)  # type: ignore[arg-type]
    assert Path(xml).exists(), f"pytest did not run as {USER}: {r.stderr[-2000:]}{r.stdout[-2000:]}"
    failed, passed, skipped = [], 0, 0
    for case in ET.parse(xml).iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(tid)
        elif case.find("skipped") is not None:
            skipped += 1
        else:
            passed += 1
    unexpected = [t for t in failed if not any(t.endswith(k) for k in KNOWN_UNPRIVILEGED_GAPS)]
    assert passed >= 50, (passed, skipped, r.stdout[-3000:])  # positive control: the suite really ran
    assert not unexpected, f"failed as {USER}: {unexpected}\n{r.stdout[-6000:]}"
    healed = [k for k in KNOWN_UNPRIVILEGED_GAPS if not any(t.endswith(k) for t in failed)]
    assert not healed, f"now pass as {USER}; remove them from KNOWN_UNPRIVILEGED_GAPS: {healed}"
