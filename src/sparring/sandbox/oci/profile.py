"""The OCI backend's seccomp profile: podman's default one, and no call that can act on another process.

Every process of an OCI sandbox, its exec server included, is (capability-less) uid 0, and the kernel
lets a process change the limits, priority, scheduling, I/O priority or affinity of any process of its
own uid. podman's default profile allows all of these, so a command could bend the exec server and,
through it, every later command. The profile given to ``podman run --security-opt seccomp=FILE`` is
podman's default with the local backend's rules added (one definition of "calls that target another
process", in :mod:`sparring.sandbox.isolation.seccomp`):

* ``SELF_ONLY`` calls (``setpriority``, ``ioprio_set``, ``sched_set*``, ...) are allowed only with
  the arguments that name the caller itself (pid 0); any other value gets EPERM;
* ``READ_ONLY_ON_OTHERS`` (``prlimit64``): the caller's own limits, or another's read only;
* ``OTHER_PROCESS`` calls (``ptrace``, ``process_vm_*``, ``pidfd_getfd``, ...) get EPERM.

A call the default profile denies stays denied (nothing is loosened). The exec server (``/bin/sh``) and
podman's init make none of these calls on another process, so they run unchanged under it.

The profile is written once per process (per backend root), atomically, named by its content's hash.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import json
from pathlib import Path
from typing import Any

from sparring import atomicfile
from sparring.errors import SandboxUnavailableError
from sparring.sandbox.isolation.seccomp import OTHER_PROCESS, READ_ONLY_ON_OTHERS, SELF_ONLY

# Where containers-common installs podman's default profile (/etc overrides /usr/share, as podman reads them).
DEFAULT_PROFILES = (Path("/etc/containers/seccomp.json"), Path("/usr/share/containers/seccomp.json"))
Rule = dict[str, Any]


def default_profile(candidates: tuple[Path, ...] = DEFAULT_PROFILES) -> Path:
    """The first of ``candidates`` that exists; SandboxUnavailableError when none does."""
    for p in candidates:
        if p.is_file():
            return p
    raise SandboxUnavailableError(
        f"no podman seccomp profile at {' or '.join(map(str, candidates))}: install containers-common "
        "(make setup) so the OCI backend can build its own from it"
    )


def _arg(index: int, value: int, op: str) -> dict[str, Any]:
    return {"index": index, "value": value, "valueTwo": 0, "op": op}


def _eperm(name: str, *args: dict[str, Any]) -> Rule:
    return {"names": [name], "action": "SCMP_ACT_ERRNO", "errnoRet": errno.EPERM, "args": list(args)}


def _allow(name: str, *args: dict[str, Any]) -> Rule:
    return {"names": [name], "action": "SCMP_ACT_ALLOW", "args": list(args)}


def targeting_rules() -> list[Rule]:
    """The rules for every call that can act on another process (see the module docstring)."""
    rules = [_eperm(name) for name in OTHER_PROCESS]
    # Each call's EPERM rules before its ALLOW ones: with the ALLOWs first, runc's libseccomp left a
    # two-argument EPERM rule (prlimit64's) unmatched, and the call fell to the default ENOSYS.
    for name, checks in SELF_ONLY.items():
        rules += [_eperm(name, _arg(i, v, "SCMP_CMP_NE")) for i, v in checks]
        rules.append(_allow(name, *(_arg(i, v, "SCMP_CMP_EQ") for i, v in checks)))
    for name, new_arg in READ_ONLY_ON_OTHERS.items():
        rules.append(_eperm(name, _arg(0, 0, "SCMP_CMP_NE"), _arg(new_arg, 0, "SCMP_CMP_NE")))
        rules.append(_allow(name, _arg(0, 0, "SCMP_CMP_EQ")))
        rules.append(_allow(name, _arg(new_arg, 0, "SCMP_CMP_EQ")))
    return rules


def _allowed_outright(profile: dict[str, Any], name: str) -> bool:
    """Whether ``profile`` allows ``name`` with no condition on arguments or capabilities."""
    return any(
        name in r.get("names", ())
        and r.get("action") == "SCMP_ACT_ALLOW"
        and not r.get("args")
        and not (r.get("includes") or {}).get("caps")
        for r in profile.get("syscalls", ())
    )


def with_targeting_rules(profile: dict[str, Any]) -> dict[str, Any]:
    """``profile`` (podman's JSON format) with :func:`targeting_rules`: their calls are removed from every
    rule of ``profile`` and decided by ours; a conditional call the profile does not allow outright
    keeps the profile's rules (denied there, it stays denied)."""
    ours = [
        r
        for r in targeting_rules()
        if r["names"][0] in OTHER_PROCESS or _allowed_outright(profile, r["names"][0])
    ]
    taken = {r["names"][0] for r in ours}
    kept = []
    for r in profile.get("syscalls", ()):
        names = [n for n in r.get("names", ()) if n not in taken]
        if names:
            kept.append({**r, "names": names})
    return {**profile, "syscalls": kept + ours}


@functools.cache
def _rendered(source: Path) -> bytes:
    try:
        profile = json.loads(source.read_text())
        if not isinstance(profile, dict) or not isinstance(profile.get("syscalls"), list):
            raise ValueError("no list of syscalls")
    except (OSError, ValueError) as e:
        raise SandboxUnavailableError(
            f"podman's seccomp profile {source} cannot be read ({e}): reinstall containers-common"
        ) from None
    return json.dumps(with_targeting_rules(profile), indent=1, sort_keys=True).encode()


def write_profile(root: Path, source: Path | None = None) -> Path:
    """The profile file under ``root`` (written atomically the first time, named by its hash)."""
    data = _rendered(source or default_profile())
    path = root / f"seccomp-{hashlib.sha256(data).hexdigest()[:16]}.json"
    if not path.is_file():
        atomicfile.write_bytes(path, data)
    return path
