"""Code inside is an unprivileged user: no capabilities, no devices, no namespaces, no mounts, fixed identity."""

from __future__ import annotations

import json
import socket

from sec_support import in_sandbox

from sparring.sandbox.base import SandboxSpec

SAFE_DEV = {"null", "zero", "full", "random", "urandom", "tty", "console", "ptmx", "pts", "shm", "mqueue",
            "fd", "stdin", "stdout", "stderr", "core"}  # fmt: skip

PRIVILEGE_PROBE = r"""
import ctypes, errno, json, os, stat
libc = ctypes.CDLL(None, use_errno=True)
out = {}
status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
out["caps"] = {k: int(status[k].strip(), 16) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")}
out["uid"], out["euid"], out["gid"] = os.getuid(), os.geteuid(), os.getgid()
def attempt(name, fn):
    try:
        fn()
        out[name] = "ok"
    except OSError as e:
        out[name] = errno.errorcode.get(e.errno, str(e.errno))
attempt("setuid0", lambda: os.setuid(0))
attempt("mknod_char", lambda: os.mknod("/tmp/mem", stat.S_IFCHR | 0o600, os.makedev(1, 1)))
attempt("mknod_block", lambda: os.mknod("/tmp/sda", stat.S_IFBLK | 0o600, os.makedev(8, 0)))
def raw_mount():
    if libc.mount(b"none", b"/tmp", b"tmpfs", 0, None) != 0:
        raise OSError(ctypes.get_errno(), "mount")
attempt("mount_syscall", raw_mount)
def raw_unshare():
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare")
attempt("unshare_user", raw_unshare)
def sethostname():
    if libc.sethostname(b"evil", 4) != 0:
        raise OSError(ctypes.get_errno(), "sethostname")
attempt("sethostname", sethostname)
out["dev"] = sorted(os.listdir("/dev"))
out["dev_block_or_raw"] = [n for n in out["dev"] if stat.S_ISBLK(os.lstat("/dev/" + n).st_mode)
                           or (stat.S_ISCHR(os.lstat("/dev/" + n).st_mode)
                               and os.major(os.lstat("/dev/" + n).st_rdev) not in (1, 5, 136))]
out["sys"] = os.path.isdir("/sys") and len(os.listdir("/sys")) > 0
out["sys_ro"] = (not out["sys"]) or bool(os.statvfs("/sys").f_flag & os.ST_RDONLY)
print(json.dumps(out))
"""


def test_no_privileges_inside(backend):
    async def body(sb):
        return await sb.exec(["python3", "-c", PRIVILEGE_PROBE], timeout=20)

    r = in_sandbox(backend, SandboxSpec(), body)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["caps"] == {"CapInh": 0, "CapPrm": 0, "CapEff": 0, "CapBnd": 0, "CapAmb": 0}
    assert out["uid"] != 0 and out["euid"] != 0 and out["gid"] != 0
    assert out["setuid0"] in ("EPERM", "EINVAL")  # EINVAL: uid 0 is not even mapped
    assert out["mknod_char"] == "EPERM" and out["mknod_block"] == "EPERM"
    assert out["mount_syscall"] == "EPERM"
    assert out["unshare_user"] == "EPERM"
    assert out["sethostname"] == "EPERM"
    assert set(out["dev"]) <= SAFE_DEV, out["dev"]
    assert out["dev_block_or_raw"] == []
    assert out["sys_ro"]


def test_no_nested_user_namespace_sandbox_or_mount(backend):
    async def body(sb):
        return await sb.exec(
            "unshare -U true; echo unshare=$?; unshare -Ur true; echo unshare_root=$?; "
            "bwrap --unshare-user --dev-bind / / true; echo bwrap=$?; "
            "mkdir -p /tmp/m; mount -t tmpfs none /tmp/m; echo mount=$?; "
            "mount --bind /tmp /tmp/m; echo bind=$?; cat /proc/self/uid_map",
            timeout=20,
        )

    r = in_sandbox(backend, SandboxSpec(), body)
    res = dict(line.split("=") for line in r.stdout.splitlines() if "=" in line)
    assert res["unshare"] != "0" and res["unshare_root"] != "0"
    assert res["bwrap"] != "0"
    assert res["mount"] != "0" and res["bind"] != "0"


def test_hostname_and_identity_are_fixed(backend):
    async def body(sb):
        return await sb.exec("hostname; uname -n; id -un; hostname evil 2>&1; hostname; echo $HOME")

    r = in_sandbox(backend, SandboxSpec(), body)
    lines = r.stdout.splitlines()
    assert lines[0] == lines[1] == "sandbox" != socket.gethostname()
    assert lines[2] == "agent"
    assert lines[-2] == "sandbox"  # `hostname evil` did not take
    assert lines[-1] == "/home/agent"
    assert socket.gethostname() != "evil"


def test_host_proc_is_not_mounted(backend):
    async def body(sb):
        return await sb.exec(
            "cat /proc/1/cmdline | tr '\\0' ' '; echo; ls /proc | grep -c '^[0-9]'; cat /proc/self/mountinfo"
        )

    r = in_sandbox(backend, SandboxSpec(), body)
    with open("/proc/1/cmdline", "rb") as f:
        host_init = f.read().replace(b"\0", b" ").decode().strip()
    lines = r.stdout.splitlines()
    assert lines[0].strip() != host_init  # pid 1 inside is the sandbox's own init
    assert int(lines[1]) <= 5
    proc_mounts = [line for line in lines[2:] if " /proc " in line]
    assert len(proc_mounts) == 1 and " - proc " in proc_mounts[0]
