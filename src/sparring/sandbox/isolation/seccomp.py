"""A seccomp filter against the usual sandbox-escape syscalls, for bubblewrap's ``--seccomp FD``.

bubblewrap (0.8) reads a compiled classic-BPF program, a packed array of
``struct sock_filter {u16 code; u8 jt; u8 jf; u32 k}``, from a file
descriptor and installs it (with ``PR_SET_NO_NEW_PRIVS``) just before it execs
the sandboxed command, so everything inside runs under it.

The program is written by hand here rather than through libseccomp: the
Python bindings of libseccomp ship only as a Debian package for the system
interpreter (``python3-seccomp``), not as a maintained PyPI wheel for the
project's venv, and the filter below is a short, fixed list that a unit test
decodes and an interpreter (:func:`evaluate`) runs instruction by instruction.

Policy (default: allow; a deny-list of what normal tools never need):

* a foreign architecture (a 32-bit ``int 0x80`` call on x86-64, say) kills
  the process: its syscall numbers mean other things, so no list applies;
* x32 syscalls (numbers with bit 30 set on x86-64) get EPERM;
* namespace, mount, keyring, module, kexec, tracing, BPF, perf, userfaultfd,
  handle-based open, swap, reboot, accounting, quota, kernel log, clock,
  hostname, raw I/O port and io_uring syscalls get EPERM;
* ``clone`` with any ``CLONE_NEW*`` flag gets EPERM (plain fork/threads pass);
  ``clone3`` gets ENOSYS, because its flags sit behind a pointer a filter
  cannot read, and glibc then falls back to ``clone``;
* ``personality`` is allowed only to query (0xffffffff) or set the default
  (``PER_LINUX``, 0): no ``ADDR_NO_RANDOMIZE`` or ``READ_IMPLIES_EXEC``;
* ``ioctl(TIOCSTI)`` / ``ioctl(TIOCLINUX)`` (typing into a terminal) get EPERM;
* no call may change *another* process's limits, scheduling or memory placement: the kernel
  allows these between processes of one uid, and every process of a sandbox, its exec server
  (PID 1) included, has the agent's uid. ``prlimit64`` may set only the caller's limits (pid 0;
  reading another's stays allowed), ``setpriority`` only ``PRIO_PROCESS`` of pid 0, ``ioprio_set``
  only ``IOPRIO_WHO_PROCESS`` of pid 0, ``sched_setscheduler`` / ``sched_setparam`` /
  ``sched_setattr`` / ``sched_setaffinity`` / ``migrate_pages`` / ``move_pages`` only pid 0
  (:data:`SELF_ONLY`); everything else gets EPERM, so ``ulimit``, ``nice CMD``, ``ionice CMD``
  and ``taskset CMD`` work, and ``renice -p``, ``taskset -p``, ``prlimit --pid`` (setting) do not.
  ``kcmp``, ``pidfd_getfd``, ``pidfd_send_signal``, ``process_madvise`` and ``process_mrelease``
  (other processes by pidfd) are denied outright.

The data the filter sees (``struct seccomp_data``)::

    int nr; u32 arch; u64 instruction_pointer; u64 args[6];

so ``args[i]``'s low 32 bits are at offset ``16 + 8 * i`` (little-endian).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import os
import platform
import struct
from collections.abc import Sequence
from dataclasses import dataclass

# ---- BPF opcodes (linux/bpf_common.h, linux/filter.h) ----
BPF_LD, BPF_JMP, BPF_RET = 0x00, 0x05, 0x06
BPF_W, BPF_ABS, BPF_K = 0x00, 0x20, 0x00
BPF_JEQ, BPF_JGE, BPF_JSET = 0x10, 0x30, 0x40
LD_ABS = BPF_LD | BPF_W | BPF_ABS
RET_K = BPF_RET | BPF_K

# ---- seccomp return values (linux/seccomp.h) ----
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
SECCOMP_RET_DATA = 0x0000FFFF

OFF_NR, OFF_ARCH = 0, 4
BPF_MAXINSNS = 4096
INSN = struct.Struct("=HBBI")  # native order, as the kernel reads it

AUDIT_ARCH_X86_64 = 0xC000003E  # EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
AUDIT_ARCH_AARCH64 = 0xC00000B7  # EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
X32_SYSCALL_BIT = 0x40000000

# every CLONE_NEW* flag that clone(2) accepts (CLONE_NEWTIME shares its bit with CSIGNAL there)
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NS_FLAGS = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)

PERSONALITY_ALLOWED = (0x0, 0xFFFFFFFF)  # PER_LINUX, and the query
TIOCSTI, TIOCLINUX = 0x5412, 0x541C

# Calls that reach into another process (its memory, files, signals by pidfd): denied outright, on
# every backend (the OCI backend's profile takes them from here, oci/profile.py).
OTHER_PROCESS: tuple[str, ...] = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "pidfd_getfd", "pidfd_send_signal", "process_madvise", "process_mrelease",
)  # fmt: skip

# Syscalls denied with EPERM, by name. Names missing from an architecture's table are skipped.
DENIED: tuple[str, ...] = (
    # namespaces and mounts
    "mount", "umount2", "pivot_root", "unshare", "setns",
    "fsopen", "fsconfig", "fsmount", "fspick", "open_tree", "move_mount", "mount_setattr",
    # kernel keyring
    "keyctl", "add_key", "request_key",
    # other processes' memory, files and signals by pidfd
    *OTHER_PROCESS,
    # the kernel itself
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "create_module", "get_kernel_syms", "query_module", "uselib", "_sysctl", "nfsservctl",
    "bpf", "perf_event_open", "userfaultfd", "lookup_dcookie", "syslog",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    # files by handle (the "shocker" escape)
    "open_by_handle_at", "name_to_handle_at",
    # machine-wide state
    "swapon", "swapoff", "reboot", "acct", "quotactl", "quotactl_fd", "vhangup",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    # raw I/O ports (x86 only)
    "iopl", "ioperm",
)  # fmt: skip

PRIO_PROCESS = 0
IOPRIO_WHO_PROCESS = 1
# Syscalls allowed only on the calling process: each (argument index, value) must hold, compared on the
# argument's low 32 bits (the kernel reads a pid_t or int there); otherwise EPERM.
SELF_ONLY: dict[str, tuple[tuple[int, int], ...]] = {
    "setpriority": ((0, PRIO_PROCESS), (1, 0)),
    "ioprio_set": ((0, IOPRIO_WHO_PROCESS), (1, 0)),
    "sched_setscheduler": ((0, 0),),
    "sched_setparam": ((0, 0),),
    "sched_setattr": ((0, 0),),
    "sched_setaffinity": ((0, 0),),
    "migrate_pages": ((0, 0),),
    "move_pages": ((0, 0),),
}
# Syscalls allowed on the caller (argument 0 is pid 0) and, on another process, only with the given
# argument NULL: prlimit64(pid, resource, new, old) may read another's limits, never set them.
READ_ONLY_ON_OTHERS: dict[str, int] = {"prlimit64": 2}
# SELF_ONLY, READ_ONLY_ON_OTHERS and OTHER_PROCESS together are the one list of calls that can act on
# another process; both backends' filters are made from them (this module, oci/profile.py).

# Syscall numbers: arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h.
_X86_64: dict[str, int] = {
    "ioctl": 16, "clone": 56, "ptrace": 101, "syslog": 103, "uselib": 134, "personality": 135,
    "vhangup": 153, "pivot_root": 155, "_sysctl": 156, "adjtimex": 159, "acct": 163, "settimeofday": 164,
    "mount": 165, "umount2": 166, "swapon": 167, "swapoff": 168, "reboot": 169, "sethostname": 170,
    "setdomainname": 171, "iopl": 172, "ioperm": 173, "create_module": 174, "init_module": 175,
    "delete_module": 176, "get_kernel_syms": 177, "query_module": 178, "quotactl": 179, "nfsservctl": 180,
    "lookup_dcookie": 212, "clock_settime": 227, "kexec_load": 246, "add_key": 248, "request_key": 249,
    "keyctl": 250, "unshare": 272, "perf_event_open": 298, "name_to_handle_at": 303,
    "open_by_handle_at": 304, "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
    "process_vm_writev": 311, "finit_module": 313, "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323,
    "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427, "open_tree": 428,
    "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "clone3": 435,
    "mount_setattr": 442, "quotactl_fd": 443,
    "getpriority": 140, "setpriority": 141, "sched_setparam": 142, "sched_setscheduler": 144,
    "sched_setaffinity": 203, "ioprio_set": 251, "ioprio_get": 252, "migrate_pages": 256, "move_pages": 279,
    "prlimit64": 302, "kcmp": 312, "sched_setattr": 314, "pidfd_send_signal": 424, "pidfd_getfd": 438,
    "process_madvise": 440, "process_mrelease": 448,
}  # fmt: skip
_AARCH64: dict[str, int] = {
    "lookup_dcookie": 18, "ioctl": 29, "umount2": 39, "mount": 40, "pivot_root": 41, "nfsservctl": 42,
    "vhangup": 58, "quotactl": 60, "acct": 89, "personality": 92, "unshare": 97, "kexec_load": 104,
    "init_module": 105, "delete_module": 106, "clock_settime": 112, "syslog": 116, "ptrace": 117,
    "reboot": 142, "sethostname": 161, "setdomainname": 162, "settimeofday": 170, "adjtimex": 171,
    "add_key": 217, "request_key": 218, "keyctl": 219, "clone": 220, "swapon": 224, "swapoff": 225,
    "perf_event_open": 241, "name_to_handle_at": 264, "open_by_handle_at": 265, "clock_adjtime": 266,
    "setns": 268, "process_vm_readv": 270, "process_vm_writev": 271, "finit_module": 273,
    "bpf": 280, "userfaultfd": 282, "kexec_file_load": 294, "io_uring_setup": 425, "io_uring_enter": 426,
    "io_uring_register": 427, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
    "fsmount": 432, "fspick": 433, "clone3": 435, "mount_setattr": 442, "quotactl_fd": 443,
    "ioprio_set": 30, "ioprio_get": 31, "sched_setparam": 118, "sched_setscheduler": 119, "sched_setaffinity": 122,
    "setpriority": 140, "getpriority": 141, "migrate_pages": 238, "move_pages": 239, "prlimit64": 261,
    "kcmp": 272, "sched_setattr": 274, "pidfd_send_signal": 424, "pidfd_getfd": 438,
    "process_madvise": 440, "process_mrelease": 448,
}  # fmt: skip


@dataclass(frozen=True)
class Arch:
    """One architecture's audit number and syscall table."""

    name: str
    audit_arch: int
    syscalls: dict[str, int]
    x32_bit: bool = False


ARCHES: dict[str, Arch] = {
    "x86_64": Arch("x86_64", AUDIT_ARCH_X86_64, _X86_64, x32_bit=True),
    "aarch64": Arch("aarch64", AUDIT_ARCH_AARCH64, _AARCH64),
}
_MACHINE_ALIASES = {"amd64": "x86_64", "arm64": "aarch64"}


def host_arch(machine: str | None = None) -> Arch:
    """The :class:`Arch` of this machine (``platform.machine()``); unsupported ones raise."""
    m = (machine or platform.machine()).lower()
    m = _MACHINE_ALIASES.get(m, m)
    if m not in ARCHES:
        from sparring.errors import SandboxUnavailableError

        raise SandboxUnavailableError(
            f"no seccomp syscall table for architecture {m!r}: supported are {', '.join(ARCHES)}"
        )
    return ARCHES[m]


def errno_ret(code: int) -> int:
    return SECCOMP_RET_ERRNO | (code & SECCOMP_RET_DATA)


def arg_lo(i: int) -> int:
    """Offset of the low 32 bits of syscall argument ``i`` in ``struct seccomp_data``."""
    return 16 + 8 * i


def arg_hi(i: int) -> int:
    """Offset of the high 32 bits of syscall argument ``i`` (both architectures are little-endian)."""
    return 20 + 8 * i


class _Asm:
    """Collects instructions whose jumps name labels; :meth:`assemble` resolves them."""

    def __init__(self) -> None:
        self.insns: list[tuple[int, int | str, int | str, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.insns)

    def ld(self, off: int) -> None:
        self.insns.append((LD_ABS, 0, 0, off))

    def jmp(self, op: int, k: int, jt: int | str = 0, jf: int | str = 0) -> None:
        self.insns.append((BPF_JMP | op | BPF_K, jt, jf, k))

    def ret(self, k: int) -> None:
        self.insns.append((RET_K, 0, 0, k))

    def assemble(self) -> bytes:
        out = bytearray()
        for pc, (code, jt, jf, k) in enumerate(self.insns):
            offs = []
            for j in (jt, jf):
                off = self.labels[j] - pc - 1 if isinstance(j, str) else j
                if not 0 <= off <= 255:
                    raise ValueError(f"jump at {pc} out of range ({off})")
                offs.append(off)
            out += INSN.pack(code, offs[0], offs[1], k)
        return bytes(out)


def build_filter(arch: Arch | None = None) -> bytes:
    """The compiled filter for ``arch`` (default: this machine) as bytes for ``bwrap --seccomp``."""
    return _compile((arch or host_arch()).name)


@functools.cache
def _compile(arch_name: str) -> bytes:
    arch = ARCHES[arch_name]
    sc = arch.syscalls
    a = _Asm()
    a.ld(OFF_ARCH)
    a.jmp(BPF_JEQ, arch.audit_arch, 0, "kill")
    a.ld(OFF_NR)
    if arch.x32_bit:
        a.jmp(BPF_JGE, X32_SYSCALL_BIT, "eperm", 0)
    for name in DENIED:
        if name in sc:
            a.jmp(BPF_JEQ, sc[name], "eperm", 0)
    for name in SELF_ONLY:
        a.jmp(BPF_JEQ, sc[name], f"self:{name}", 0)
    ((prlimit, new_arg),) = READ_ONLY_ON_OTHERS.items()
    a.jmp(BPF_JEQ, sc[prlimit], "prlimit64", 0)
    a.jmp(BPF_JEQ, sc["clone3"], "enosys", 0)
    a.jmp(BPF_JEQ, sc["clone"], "clone", 0)
    a.jmp(BPF_JEQ, sc["personality"], "personality", 0)
    a.jmp(BPF_JEQ, sc["ioctl"], "ioctl", "allow")
    for name, checks in SELF_ONLY.items():
        a.label(f"self:{name}")
        for n, (i, value) in enumerate(checks):
            a.ld(arg_lo(i))
            a.jmp(BPF_JEQ, value, "allow" if n == len(checks) - 1 else 0, "eperm")
    a.label("prlimit64")
    a.ld(arg_lo(0))  # pid 0: the caller itself
    a.jmp(BPF_JEQ, 0, "allow", 0)
    a.ld(arg_lo(new_arg))  # another pid: only to read (new limit NULL, both halves of the pointer zero)
    a.jmp(BPF_JEQ, 0, 0, "eperm")
    a.ld(arg_hi(new_arg))
    a.jmp(BPF_JEQ, 0, "allow", "eperm")
    a.label("clone")
    a.ld(arg_lo(0))  # flags: the first argument on both x86-64 and aarch64
    a.jmp(BPF_JSET, CLONE_NS_FLAGS, "eperm", "allow")
    a.label("ioctl")
    a.ld(arg_lo(1))  # the request number is an unsigned int: its low word
    a.jmp(BPF_JEQ, TIOCSTI, "eperm", 0)
    a.jmp(BPF_JEQ, TIOCLINUX, "eperm", "allow")
    a.label("personality")
    a.ld(arg_lo(0))
    for v in PERSONALITY_ALLOWED:
        a.jmp(BPF_JEQ, v, "allow", 0)
    # anything else falls through to EPERM
    a.label("eperm")
    a.ret(errno_ret(errno.EPERM))
    a.label("allow")
    a.ret(SECCOMP_RET_ALLOW)
    a.label("enosys")
    a.ret(errno_ret(errno.ENOSYS))
    a.label("kill")
    a.ret(SECCOMP_RET_KILL_PROCESS)
    prog = a.assemble()
    if len(prog) // INSN.size > BPF_MAXINSNS:
        raise ValueError("seccomp program too long")
    return prog


def decode(prog: bytes) -> list[tuple[int, int, int, int]]:
    """``(code, jt, jf, k)`` per instruction."""
    if len(prog) % INSN.size:
        raise ValueError(f"a BPF program is a whole number of {INSN.size}-byte instructions")
    return [INSN.unpack_from(prog, i) for i in range(0, len(prog), INSN.size)]


def evaluate(prog: bytes, arch: int, nr: int, args: Sequence[int] = ()) -> int:
    """Run ``prog`` on one syscall like the kernel does (the subset of cBPF this module emits).

    Returns the seccomp action word (``SECCOMP_RET_ALLOW``, ``errno_ret(EPERM)``...).
    """
    full = [*args, *([0] * (6 - len(args)))][:6]
    data = struct.pack("=iIQ6Q", nr, arch, 0, *[x & 0xFFFFFFFFFFFFFFFF for x in full])
    insns = decode(prog)
    acc, pc = 0, 0
    for _ in range(len(insns)):  # classic BPF jumps only forward: one pass at most
        code, jt, jf, k = insns[pc]
        if code == LD_ABS:
            (acc,) = struct.unpack_from("=I", data, k)
            pc += 1
        elif code == RET_K:
            return k
        elif code & 0x07 == BPF_JMP:
            op = code & 0xF0
            hit = acc == k if op == BPF_JEQ else acc >= k if op == BPF_JGE else bool(acc & k)
            if op not in (BPF_JEQ, BPF_JGE, BPF_JSET):
                raise ValueError(f"unsupported jump op {op:#x}")
            pc += 1 + (jt if hit else jf)
        else:
            raise ValueError(f"unsupported instruction {code:#x}")
    raise ValueError("program ran off its end")


def bwrap_args(prog: bytes | None = None) -> tuple[list[str], int]:
    """``(["--seccomp", FD], FD)``: FD is a pipe's read end holding the program.

    The caller passes FD to bubblewrap (``pass_fds=(fd,)``) and closes it once
    bubblewrap is started; bubblewrap reads the program to EOF. A program is
    well under a pipe's 64 KiB buffer, so writing it never blocks.
    """
    data = build_filter() if prog is None else prog
    r, w = os.pipe()
    try:
        os.write(w, data)
    except BaseException:
        os.close(r)
        raise
    finally:
        os.close(w)
    return ["--seccomp", str(r)], r


def close_fd(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
