"""The seccomp program, decoded and interpreted: structure, architecture check, each rule."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparring.sandbox.isolation import seccomp as sc

EPERM = sc.errno_ret(errno.EPERM)
ENOSYS = sc.errno_ret(errno.ENOSYS)
ALLOW = sc.SECCOMP_RET_ALLOW
KILL = sc.SECCOMP_RET_KILL_PROCESS
# What every normal tool needs; none of these may ever be denied.
EVERYDAY = (
    "read", "write", "openat", "close", "mmap", "mprotect", "brk", "execve", "wait4", "pipe2",
    "getdents64", "newfstatat", "futex", "socket", "connect", "exit_group", "kill", "rt_sigaction",
)  # fmt: skip
_EVERYDAY_NR = {
    "x86_64": dict(read=0, write=1, openat=257, close=3, mmap=9, mprotect=10, brk=12, execve=59, wait4=61,
                   pipe2=293, getdents64=217, newfstatat=262, futex=202, socket=41, connect=42,
                   exit_group=231, kill=62, rt_sigaction=13),
    "aarch64": dict(read=63, write=64, openat=56, close=57, mmap=222, mprotect=226, brk=214, execve=221,
                    wait4=260, pipe2=59, getdents64=61, newfstatat=79, futex=98, socket=198, connect=203,
                    exit_group=94, kill=129, rt_sigaction=134),
}  # fmt: skip
ARCHES = list(sc.ARCHES.values())


@pytest.fixture(params=ARCHES, ids=lambda a: a.name)
def arch(request) -> sc.Arch:
    return request.param


def run(arch: sc.Arch, name: str, *args: int) -> int:
    return sc.evaluate(
        sc.build_filter(arch),
        arch.audit_arch,
        arch.syscalls.get(name, _EVERYDAY_NR[arch.name].get(name, -1)),
        args,
    )


def test_program_is_well_formed(arch):
    prog = sc.build_filter(arch)
    insns = sc.decode(prog)
    assert len(prog) == 8 * len(insns) and 0 < len(insns) <= sc.BPF_MAXINSNS
    # first the architecture is loaded and checked, then the syscall number
    assert insns[0] == (sc.LD_ABS, 0, 0, sc.OFF_ARCH)
    assert insns[1][0] == sc.BPF_JMP | sc.BPF_JEQ and insns[1][3] == arch.audit_arch
    assert insns[2] == (sc.LD_ABS, 0, 0, sc.OFF_NR)
    for pc, (code, jt, jf, k) in enumerate(insns):
        if code & 0x07 == sc.BPF_JMP:
            assert pc + 1 + max(jt, jf) < len(insns), f"jump at {pc} leaves the program"
        elif code == sc.LD_ABS:
            assert k % 4 == 0 and k < 64, "loads stay inside struct seccomp_data"
        else:
            assert code == sc.RET_K
    assert insns[-1][0] == sc.RET_K, "the program ends in a return"
    returns = {k for code, _, _, k in insns if code == sc.RET_K}
    assert returns == {ALLOW, EPERM, ENOSYS, KILL}


def test_program_bytes_are_stable_per_arch(arch):
    assert sc.build_filter(arch) == sc.build_filter(arch)
    assert sc.build_filter(sc.ARCHES["x86_64"]) != sc.build_filter(sc.ARCHES["aarch64"])


def test_every_denied_syscall_gets_eperm(arch):
    denied = [n for n in sc.DENIED if n in arch.syscalls]
    assert len(denied) >= 45
    for name in denied:
        assert run(arch, name) == EPERM, name


def test_everyday_syscalls_are_allowed(arch):
    for name in EVERYDAY:
        assert run(arch, name) == ALLOW, name


def test_foreign_architecture_is_killed(arch):
    prog = sc.build_filter(arch)
    i386 = 0x40000003  # AUDIT_ARCH_I386: int 0x80 from a 64-bit process
    other = sc.ARCHES["aarch64" if arch.name == "x86_64" else "x86_64"].audit_arch
    for a in (i386, other):
        assert sc.evaluate(prog, a, 0) == KILL
        assert sc.evaluate(prog, a, arch.syscalls["mount"]) == KILL


def test_x32_syscalls_are_denied_on_x86_64():
    x86 = sc.ARCHES["x86_64"]
    prog = sc.build_filter(x86)
    assert sc.evaluate(prog, x86.audit_arch, sc.X32_SYSCALL_BIT | 0) == EPERM  # x32 read
    assert sc.evaluate(prog, x86.audit_arch, sc.X32_SYSCALL_BIT | 165) == EPERM  # x32 mount


def test_clone_is_denied_only_with_namespace_flags(arch):
    sigchld = 17
    fork_flags = 0x01200000 | sigchld  # CLONE_CHILD_SETTID | CLONE_CHILD_CLEARTID | SIGCHLD (glibc fork)
    thread_flags = 0x003D0F00  # pthread_create's flags
    assert run(arch, "clone", fork_flags) == ALLOW
    assert run(arch, "clone", thread_flags) == ALLOW
    for flag in (sc.CLONE_NEWUSER, sc.CLONE_NEWNS, sc.CLONE_NEWPID, sc.CLONE_NEWNET, sc.CLONE_NEWUTS,
                 sc.CLONE_NEWIPC, sc.CLONE_NEWCGROUP):  # fmt: skip
        assert run(arch, "clone", fork_flags | flag) == EPERM, hex(flag)
    # flags in the upper word of the 64-bit argument are ignored by the kernel, and by the filter
    assert run(arch, "clone", (1 << 40) | fork_flags) == ALLOW


def test_clone3_falls_back_to_clone(arch):
    assert run(arch, "clone3") == ENOSYS


def test_personality_allows_only_the_default_and_the_query(arch):
    assert run(arch, "personality", 0) == ALLOW
    assert run(arch, "personality", 0xFFFFFFFF) == ALLOW
    for persona in (0x0040000, 0x0400000, 0x0008, 0x0020000):  # ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC...
        assert run(arch, "personality", persona) == EPERM


def test_terminal_injection_ioctls_are_denied(arch):
    assert run(arch, "ioctl", 1, sc.TIOCSTI) == EPERM
    assert run(arch, "ioctl", 1, sc.TIOCLINUX) == EPERM
    assert run(arch, "ioctl", 1, 0x5401) == ALLOW  # TCGETS: isatty()
    assert run(arch, "ioctl", 1, 0x541B) == ALLOW  # FIONREAD


@settings(max_examples=300, deadline=None)
@given(nr=st.integers(0, 1023), args=st.lists(st.integers(0, 2**64 - 1), min_size=6, max_size=6))
def test_any_syscall_gets_exactly_one_known_action(nr, args):
    x86 = sc.ARCHES["x86_64"]
    action = sc.evaluate(sc.build_filter(x86), x86.audit_arch, nr, args)
    denied_nrs = {x86.syscalls[n] for n in sc.DENIED if n in x86.syscalls}
    if nr in denied_nrs:
        assert action == EPERM
    elif nr not in (
        x86.syscalls["clone"],
        x86.syscalls["clone3"],
        x86.syscalls["personality"],
        x86.syscalls["ioctl"],
        x86.syscalls["prlimit64"],
        *(x86.syscalls[n] for n in sc.SELF_ONLY),
    ):
        assert action == ALLOW
    else:
        assert action in (ALLOW, EPERM, ENOSYS)


@pytest.mark.parametrize(
    ("arch_name", "header", "pattern"),
    [
        ("x86_64", "/usr/include/x86_64-linux-gnu/asm/unistd_64.h", r"#define __NR_(\w+)\s+(\d+)"),
        ("aarch64", "/usr/include/asm-generic/unistd.h", r"#define __NR(?:3264)?_(\w+)\s+(\d+)"),
    ],
)
def test_syscall_numbers_match_the_kernel_headers(arch_name, header, pattern):
    if not Path(header).exists():
        pytest.skip(f"{header} is not installed (apt-get install linux-libc-dev)")
    table = {m[1]: int(m[2]) for m in re.finditer(pattern, Path(header).read_text())}
    ours = sc.ARCHES[arch_name].syscalls
    for name, nr in ours.items():
        assert table.get(name) == nr, f"{arch_name} {name}: ours {nr}, header {table.get(name)}"
    # every name of the deny-list that this architecture has is in our table
    assert {n for n in sc.DENIED if n in table} <= set(ours)


def test_host_arch_picks_the_table_from_the_machine_name():
    assert sc.host_arch("x86_64").audit_arch == sc.AUDIT_ARCH_X86_64
    assert sc.host_arch("amd64").name == "x86_64"
    assert sc.host_arch("aarch64").audit_arch == sc.AUDIT_ARCH_AARCH64
    assert sc.host_arch("arm64").name == "aarch64"
    from sparring.errors import SandboxUnavailableError

    with pytest.raises(SandboxUnavailableError, match="riscv64"):
        sc.host_arch("riscv64")


def test_bwrap_args_hand_over_the_program_through_a_pipe():
    args, fd = sc.bwrap_args()
    try:
        assert args == ["--seccomp", str(fd)]
        data = b""
        while chunk := os.read(fd, 4096):
            data += chunk
        assert data == sc.build_filter()
    finally:
        sc.close_fd(fd)


def test_calls_on_another_process_are_denied_and_on_the_caller_allowed(arch):
    """Limits, priority, I/O priority, scheduling, affinity and page placement: pid 0 only."""
    other = 1  # PID 1 of the sandbox: the exec server, the same uid as the agent
    for name in ("sched_setscheduler", "sched_setparam", "sched_setattr", "sched_setaffinity",
                 "migrate_pages", "move_pages"):  # fmt: skip
        assert run(arch, name, 0, 0, 0) == ALLOW, name
        assert run(arch, name, other, 0, 0) == EPERM, name
        assert run(arch, name, 0xFFFFFFFF, 0, 0) == EPERM, name  # -1
        assert run(arch, name, 1 << 32, 0, 0) == ALLOW, name  # the kernel reads an int: the low word is 0
    # setpriority(which, who, prio): PRIO_PROCESS of the caller only; a process group or a user never
    assert run(arch, "setpriority", 0, 0, 19) == ALLOW
    assert run(arch, "setpriority", 0, other, 19) == EPERM
    assert run(arch, "setpriority", 1, 0, 19) == EPERM  # PRIO_PGRP
    assert run(arch, "setpriority", 2, 0, 19) == EPERM  # PRIO_USER of the caller's uid: PID 1 too
    assert run(arch, "getpriority", 2, 0) == ALLOW  # reading is harmless
    # ioprio_set(which, who, ioprio): IOPRIO_WHO_PROCESS of the caller only
    idle = 3 << 13
    assert run(arch, "ioprio_set", 1, 0, idle) == ALLOW
    assert run(arch, "ioprio_set", 1, other, idle) == EPERM
    assert run(arch, "ioprio_set", 2, 0, idle) == EPERM  # IOPRIO_WHO_PGRP
    assert run(arch, "ioprio_set", 3, 0, idle) == EPERM  # IOPRIO_WHO_USER


def test_prlimit_sets_only_the_callers_limits_and_reads_anyones(arch):
    buf = 0x7FFF_0000_1000  # a user-space pointer with both halves non-zero
    assert run(arch, "prlimit64", 0, 0, buf, 0) == ALLOW  # setrlimit, ulimit
    assert run(arch, "prlimit64", 1, 0, buf, 0) == EPERM  # prlimit --pid 1 --cpu=1
    assert run(arch, "prlimit64", 1, 0, buf & 0xFFFF_FFFF, 0) == EPERM
    assert run(arch, "prlimit64", 1, 0, buf & ~0xFFFF_FFFF, 0) == EPERM  # only the high half set
    assert run(arch, "prlimit64", 1, 0, 0, buf) == ALLOW  # prlimit --pid 1 (read only)


def test_pidfd_and_cross_process_calls_are_denied(arch):
    for name in ("kcmp", "pidfd_getfd", "pidfd_send_signal", "process_madvise", "process_mrelease",
                 "process_vm_writev", "perf_event_open"):  # fmt: skip
        assert name in sc.DENIED and run(arch, name, 0, 0, 0) == EPERM, name
