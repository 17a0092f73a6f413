"""The seccomp filter for real: installed by bubblewrap, denying escape syscalls, not breaking tools."""

from __future__ import annotations

import json
import shutil
import subprocess
import textwrap

from sec_support import in_sandbox

from sparring.sandbox.base import SandboxSpec
from sparring.sandbox.environment import host_usr_binds
from sparring.sandbox.isolation import seccomp

# Calls each denied syscall with arguments that are harmless even unfiltered (bad fds, NULL
# pointers, no-op requests) and prints the errno name (or "ok") per syscall.
PROBE = textwrap.dedent(
    r"""
    import ctypes, errno, json, os, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    table, special = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    def call(nr, *args):
        ctypes.set_errno(0)
        rc = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) for a in args])
        return "ok" if rc != -1 else errno.errorcode.get(ctypes.get_errno(), "?")
    out = {}
    for name, nr in table.items():
        out[name] = call(nr, *special.get(name, [-1, 0, 0, 0, 0, 0]))
    out["clone_newuser"] = call(table["clone"], 0x10000000 | 17, 0, 0, 0, 0)
    out["clone3"] = call(table["clone3"], 0, 0)
    out["personality_no_aslr"] = call(table["personality"], 0x0040000)
    out["personality_query"] = call(table["personality"], 0xFFFFFFFF)
    status = dict(l.split(":", 1) for l in open("/proc/self/status").read().splitlines())
    out["Seccomp"] = status["Seccomp"].strip()
    out["NoNewPrivs"] = status["NoNewPrivs"].strip()
    print(json.dumps(out))
    """
)
# Arguments that make the unfiltered kernel answer something other than EPERM, so EPERM proves the filter.
SPECIAL = {
    "setns": [-1, 0],  # EBADF
    "ptrace": [7, 0, 0, 0],  # PTRACE_CONT of pid 0: ESRCH
    "process_vm_readv": ["PID", 0, 0, 0, 0, 0],  # nothing to copy: 0
    "unshare": [0x10000000],  # a nested user namespace: allowed by the kernel here
    "keyctl": [0, -3, 0],  # KEYCTL_GET_KEYRING_ID of the session keyring
    "reboot": [0, 0, 0, 0],  # bad magic
    "sethostname": [0, 0],
    "syslog": [3, 0, 0],  # SYSLOG_ACTION_READ_ALL into NULL
    "ioperm": [0, 0, 0],
    "iopl": [0],
}
DISTINGUISHING = ("setns", "ptrace", "process_vm_readv", "unshare", "keyctl")


def _probe_args() -> tuple[str, str]:
    arch = seccomp.host_arch()
    names = [n for n in seccomp.DENIED if n in arch.syscalls]
    table = {n: arch.syscalls[n] for n in [*names, "clone", "clone3", "personality"]}
    return json.dumps(table), json.dumps(SPECIAL)


def _bwrap_probe(with_filter: bool) -> dict[str, str]:
    """Run the probe under a bare bubblewrap (no sparring code in between), with or without the filter."""
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    table, special = _probe_args()
    special = special.replace('"PID"', "1")
    argv = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--cap-drop",
        "ALL",
        "--uid",
        "1000",
        "--gid",
        "1000",
    ]
    argv += host_usr_binds() + ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    fds: tuple[int, ...] = ()
    if with_filter:
        extra, fd = seccomp.bwrap_args()
        argv += extra
        fds = (fd,)
    try:
        r = subprocess.run(
            [*argv, "/usr/bin/python3", "-c", PROBE, table, special],
            capture_output=True, text=True, timeout=30, pass_fds=fds,
        )  # fmt: skip
    finally:
        for fd in fds:
            seccomp.close_fd(fd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_filter_turns_kernel_answers_into_eperm():
    plain, filtered = _bwrap_probe(False), _bwrap_probe(True)
    # control: without the filter these calls are not refused with EPERM (some even succeed)
    for name in DISTINGUISHING:
        assert plain[name] != "EPERM", (name, plain[name])
    assert plain["personality_no_aslr"] == "ok" and plain["Seccomp"] == "0"
    # with it, every denied syscall is EPERM
    denied = [n for n in seccomp.DENIED if n in seccomp.host_arch().syscalls]
    assert {n: filtered[n] for n in denied} == dict.fromkeys(denied, "EPERM")
    assert filtered["clone_newuser"] == "EPERM" and filtered["clone3"] == "ENOSYS"
    assert filtered["personality_no_aslr"] == "EPERM" and filtered["personality_query"] == "ok"
    assert filtered["Seccomp"] == "2" and filtered["NoNewPrivs"] == "1"


def test_local_sandbox_runs_every_command_under_the_filter(backend):
    table, special = _probe_args()

    async def body(sb):
        return await sb.exec(
            [
                "sh",
                "-c",
                'exec python3 -c "$0" "$1" "$(echo "$2" | sed s/\\"PID\\"/$$/)"',
                PROBE,
                table,
                special,
            ]
        )

    r = in_sandbox(backend, SandboxSpec(), body)
    assert r.exit_code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["Seccomp"] == "2"
    denied = [n for n in seccomp.DENIED if n in seccomp.host_arch().syscalls]
    assert {n: out[n] for n in denied} == dict.fromkeys(denied, "EPERM")
    assert out["clone_newuser"] == "EPERM" and out["clone3"] == "ENOSYS"


TOOLS_TEST = """
import multiprocessing, subprocess, threading, asyncio

def square(x):
    return x * x

def test_threads_processes_and_asyncio():
    t = threading.Thread(target=lambda: None); t.start(); t.join()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        assert pool.map(square, [1, 2, 3]) == [1, 4, 9]
    assert subprocess.run(["sh", "-c", "echo hi"], capture_output=True, text=True).stdout == "hi\\n"
    async def main():
        p = await asyncio.create_subprocess_exec("true")
        return await p.wait()
    assert asyncio.run(main()) == 0
"""


def test_normal_tools_still_work_under_the_filter(backend):
    async def body(sb):
        await sb.write_file("test_tools.py", TOOLS_TEST.encode())
        results = {}
        for name, cmd in {
            "sh": "echo ok | tr a-z A-Z && ls / >/dev/null && tar czf /tmp/a.tgz /workspace 2>/dev/null && echo done",
            "python": "python3 -c 'import ssl, sqlite3, json, hashlib; print(sum(range(10)))'",
            "pytest": "python3 -m pytest -q -p no:cacheprovider test_tools.py",
            "git": "cd /tmp && git init -q r && cd r && git -c user.email=a@b -c user.name=a commit -q --allow-empty -m x && git log --oneline | wc -l",
            "pip": "python3 -m pip --version",
        }.items():
            results[name] = await sb.exec(cmd, timeout=60)
        return results

    res = in_sandbox(backend, SandboxSpec(pids=128, memory_mb=1024), body)
    for name, r in res.items():
        assert r.exit_code == 0, (name, r.stdout, r.stderr)
    assert res["sh"].stdout == "OK\ndone\n"
    assert res["python"].stdout == "45\n"
    assert "1 passed" in res["pytest"].stdout
    assert res["git"].stdout.strip() == "1"
    assert res["pip"].stdout.startswith("pip ")


def test_the_program_is_readable_by_this_bubblewrap():
    # bwrap rejects a program whose length is not a multiple of 8; a truncated one must fail loudly
    bwrap = shutil.which("bwrap")
    assert bwrap is not None
    extra, fd = seccomp.bwrap_args(seccomp.build_filter()[:-3])
    try:
        r = subprocess.run(
            [bwrap, *host_usr_binds(), *extra, "/usr/bin/true"],
            capture_output=True,
            text=True,
            pass_fds=(fd,),
        )
    finally:
        seccomp.close_fd(fd)
    assert r.returncode != 0 and "seccomp" in r.stderr.lower()
