"""Host files outside the mounts can be neither read nor written, from inside or through the host-side API."""

from __future__ import annotations

import os

import pytest
from sec_support import CANARY_TEXT, in_sandbox

from sparring.errors import SandboxError
from sparring.sandbox.base import SandboxSpec


def test_host_file_outside_the_mounts_cannot_be_read_from_inside(backend, canary):
    async def body(sb):
        return await sb.exec(
            f"cat {canary}; cat /proc/1/root{canary}; cat /proc/self/root{canary}; "
            f"cat /workspace/../..{canary}; ls {canary.parent}; echo done"
        )

    r = in_sandbox(backend, SandboxSpec(), body)
    assert r.stdout.strip().endswith("done"), r.stderr  # the payload ran to its end
    assert CANARY_TEXT not in r.stdout and "canary.txt" not in r.stdout
    assert (
        r.stderr.count("No such file or directory") + r.stderr.count("Permission denied") == 5
    )  # all five failed


def test_host_file_outside_the_mounts_cannot_be_written_from_inside(backend, canary):
    async def body(sb):
        return await sb.exec(
            f"mkdir -p {canary.parent} && echo pwned > {canary} && cat {canary}; "
            f"echo pwned > /proc/1/root{canary}; echo pwned >> /proc/self/root{canary}; echo done"
        )

    r = in_sandbox(backend, SandboxSpec(), body)
    assert r.stdout.endswith("done\n")
    assert canary.read_text() == CANARY_TEXT + "\n"
    assert sorted(os.listdir(canary.parent)) == ["canary.txt"]


def test_host_side_api_refuses_paths_outside_the_workspace(backend, canary):
    async def body(sb):
        with pytest.raises(SandboxError):
            await sb.write_file(str(canary), b"pwned")
        with pytest.raises(SandboxError):
            await sb.write_file("../../../../../../" + str(canary), b"pwned")
        with pytest.raises(SandboxError):
            await sb.read_file("../../../../../../" + str(canary))
        with pytest.raises(SandboxError):
            await sb.delete_file("/" + str(canary))
        with pytest.raises(OSError):  # an absolute path is read inside the sandbox, where it does not exist
            await sb.read_file(str(canary))
        return True

    assert in_sandbox(backend, SandboxSpec(), body)
    assert canary.read_text() == CANARY_TEXT + "\n"


def test_read_only_mount_cannot_be_written(backend, canary):
    async def body(sb):
        return await sb.exec(
            "cat /judge/secrets/canary.txt; echo pwned > /judge/secrets/canary.txt; "
            "rm -f /judge/secrets/canary.txt; touch /judge/secrets/new; mv /judge/secrets/canary.txt /tmp/x; echo done"
        )

    r = in_sandbox(backend, SandboxSpec(extra_ro={"/judge/secrets": canary.parent}), body)
    assert r.stdout.startswith(CANARY_TEXT)  # the mount is there (the attack is real)...
    assert r.stdout.endswith("done\n") and r.stderr.count("Read-only file system") >= 3
    assert canary.read_text() == CANARY_TEXT + "\n"  # ...and read-only
    assert sorted(os.listdir(canary.parent)) == ["canary.txt"]


def test_task_workspace_on_the_host_is_never_modified(backend, workspace):
    before = {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()}

    async def body(sb):
        return await sb.exec(
            "echo pwned > /workspace/f.txt; rm -rf /workspace/sub; touch /workspace/new; echo done"
        )

    r = in_sandbox(backend, SandboxSpec(workspace=workspace), body)
    assert r.stdout == "done\n"
    assert {p: p.read_bytes() for p in workspace.rglob("*") if p.is_file()} == before
    assert not (workspace / "new").exists()


def test_host_file_descriptors_are_not_inherited(backend, canary):
    fd = os.open(canary, os.O_RDONLY)
    os.set_inheritable(fd, True)
    try:

        async def body(sb):
            return await sb.exec(
                "for f in /proc/self/fd/*; do echo $f $(readlink $f); done; cat <&" + str(fd)
            )

        r = in_sandbox(backend, SandboxSpec(), body)
    finally:
        os.close(fd)
    assert str(canary) not in r.stdout and CANARY_TEXT not in r.stdout
    fds = [
        line.split()[0].rsplit("/", 1)[1]
        for line in r.stdout.splitlines()
        if line.startswith("/proc/self/fd/")
    ]
    assert set(fds) <= {"0", "1", "2", "3"}, r.stdout  # stdio and the shell's directory scan only
