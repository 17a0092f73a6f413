"""Each fallback a host without root (or without a feature) gets, forced here, still contains the agent.

The fallbacks are forced the way a user would (``mode="copy"``, ``SPARRING_CGROUPS=off``,
``SPARRING_EXEC_SERVER=python``), so they run on every CI machine whatever it offers; each test
checks that ``sparring doctor``'s check reports the same fallback the backend took (one detector),
runs a payload that would break out or overrun if the fallback did not hold, with a positive
control showing the payload really ran.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from sparring.doctor import checks
from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.local.backend import LocalBackend

ESCAPES = (  # each line prints OK only if the sandbox let it through
    "echo x > /etc/sparring-escape && echo WROTE_ETC",
    "unshare -U true 2>/dev/null && echo NEW_USERNS",
    "cat /proc/1/root/etc/shadow 2>/dev/null | head -c1 | grep -q . && echo HOST_SHADOW",
)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    d = tmp_path / "ws"
    d.mkdir()
    (d / "f.txt").write_text("orig\n")
    os.chmod(tmp_path, 0o755)
    return d


async def _contained(b: LocalBackend, ws: Path, spec: SandboxSpec | None = None) -> tuple[str, str]:
    """Run the escape payloads and a write to /workspace; return (payload output, host file after)."""
    sb = await b.create(spec or SandboxSpec(workspace=ws))
    try:
        r = await sb.exec(
            "echo RAN; echo changed > f.txt; " + "; ".join(f"( {c} )" for c in ESCAPES), timeout=30
        )
        return r.stdout, (ws / "f.txt").read_text()
    finally:
        await sb.close()


def _assert_contained(out: str, host_file: str) -> None:
    assert "RAN" in out  # positive control: the payload ran inside the sandbox
    for marker in ("WROTE_ETC", "NEW_USERNS", "HOST_SHADOW"):
        assert marker not in out, out
    assert host_file == "orig\n"  # the agent's write stayed in the sandbox
    assert not Path("/etc/sparring-escape").exists()


def test_copy_mode_contains_and_doctor_agrees(tmp_path, ws, monkeypatch):
    monkeypatch.setenv("SPARRING_SANDBOX_MODE", "copy")
    b = LocalBackend(root=tmp_path / "root")
    assert b.mode == "copy" and "copy mode was asked for" in b.copy_reason
    c = checks.check_overlay()
    assert c.status == "degraded" and "copy-mode" in (c.fallback or "")
    _assert_contained(*run(_contained(b, ws)))


def test_rlimits_instead_of_cgroups_contain_memory(tmp_path, ws, monkeypatch):
    monkeypatch.setenv("SPARRING_CGROUPS", "off")
    c = checks.check_cgroups()
    assert c.status == "degraded" and "rlimits" in (c.fallback or "") and "SPARRING_CGROUPS=off" in c.detail
    b = LocalBackend(root=tmp_path / "root")
    spec = SandboxSpec(workspace=ws, memory_mb=128)

    async def body() -> tuple[tuple[str, ...], dict[str, Path], str, str]:
        sb = await b.create(spec)
        try:
            small = await sb.exec("python3 -c 'x = bytearray(16 << 20); print(\"SMALL_OK\")'", timeout=30)
            big = await sb.exec(
                "python3 -c 'x = bytearray(512 << 20); print(\"BIG_OK\")' 2>&1 | tail -1", timeout=30
            )
            return sb.degraded, dict(sb.cg.dirs), small.stdout, big.stdout
        finally:
            await sb.close()

    degraded, dirs, small, big = run(body())
    assert dirs == {} and any(d.startswith("memory:") for d in degraded)  # no cgroup: the rlimit path
    assert "SMALL_OK" in small  # positive control: allocation works under the limit
    assert "BIG_OK" not in big and "MemoryError" in big  # 512 MB > 128 MB: refused by the rlimit
    _assert_contained(*run(_contained(b, ws, spec)))


def test_python_exec_server_contains(tmp_path, ws, monkeypatch):
    monkeypatch.setenv("SPARRING_EXEC_SERVER", "python")
    c = checks.check_exec_server()
    assert c.status == "degraded" and c.fallback == "the Python exec server"
    b = LocalBackend(root=tmp_path / "root")
    assert b.server_kind == "python"
    _assert_contained(*run(_contained(b, ws)))


def test_all_fallbacks_at_once_as_a_cluster_user_gets_them(tmp_path, ws, monkeypatch):
    """Copy mode, rlimits and the Python server together: what an unprivileged user without a compiler gets."""
    for k, v in (
        ("SPARRING_SANDBOX_MODE", "copy"),
        ("SPARRING_CGROUPS", "off"),
        ("SPARRING_EXEC_SERVER", "python"),
    ):
        monkeypatch.setenv(k, v)
    names = {c.name for c in checks.sandbox_degradations()}
    assert names == {"overlayfs", "cgroups", "exec server"}
    b = LocalBackend(root=tmp_path / "root")
    assert (b.mode, b.server_kind) == ("copy", "python")
    _assert_contained(*run(_contained(b, ws, SandboxSpec(workspace=ws, memory_mb=128, pids=64))))


def test_copy_mode_reset_empties_tmp_home_and_shm(tmp_path, ws):
    """What one user of a copy-mode sandbox leaves in /tmp, $HOME or /dev/shm is gone after reset (the
    judge resets between the reference run and the candidate: the reference's outputs must not stay)."""
    b = LocalBackend(root=tmp_path / "root", mode="copy")
    plant = "echo secret > /tmp/t; echo secret > $HOME/h; echo secret > /dev/shm/s; echo x > f.txt"
    look = "cat /tmp/t $HOME/h /dev/shm/s f.txt 2>/dev/null; true"

    async def body() -> tuple[str, str]:
        sb = await b.create(SandboxSpec(workspace=ws))
        try:
            await sb.exec(plant)
            before = (await sb.exec(look)).stdout
            await sb.reset()
            return before, (await sb.exec(look)).stdout
        finally:
            await sb.close()

    before, after = run(body())
    assert before.count("secret") == 3  # positive control: the files were there
    assert after == "orig\n"
