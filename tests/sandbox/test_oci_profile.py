"""The OCI backend's seccomp profile, as data: made from podman's default, it decides every call that can
act on another process by the local backend's one list, and loosens nothing the default denies.

Its effect inside a real container is tested in tests/security/test_oci_pid1.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparring.errors import SandboxUnavailableError
from sparring.sandbox.isolation.seccomp import OTHER_PROCESS, READ_ONLY_ON_OTHERS, SELF_ONLY
from sparring.sandbox.oci.profile import default_profile, with_targeting_rules, write_profile

DEFAULT = {
    "defaultAction": "SCMP_ACT_ERRNO",
    "defaultErrnoRet": 38,
    "syscalls": [
        {"names": ["migrate_pages", "reboot"], "action": "SCMP_ACT_ERRNO", "args": [], "errnoRet": 1},
        {
            "names": ["read", "ptrace", "setpriority", "prlimit64", "sched_setaffinity", "sched_setattr"],
            "action": "SCMP_ACT_ALLOW",
            "args": [],
        },
        {"names": ["kcmp"], "action": "SCMP_ACT_ALLOW", "args": [], "includes": {"caps": ["CAP_SYS_PTRACE"]}},
    ],
}


def _rules(profile: dict, name: str) -> list[dict]:
    return [r for r in profile["syscalls"] if name in r["names"]]


def test_targeting_calls_are_decided_by_the_shared_list_and_nothing_is_loosened():
    out = with_targeting_rules(DEFAULT)
    assert _rules(out, "read") == [{"names": ["read"], "action": "SCMP_ACT_ALLOW", "args": []}]
    for name in OTHER_PROCESS:  # denied outright, whatever the default said (ptrace was allowed)
        assert [r["action"] for r in _rules(out, name)] == ["SCMP_ACT_ERRNO"], name
        assert _rules(out, name)[0]["errnoRet"] == 1 and not _rules(out, name)[0]["args"]
    for name in ("setpriority", "sched_setaffinity", "sched_setattr"):
        allow = [r for r in _rules(out, name) if r["action"] == "SCMP_ACT_ALLOW"]
        assert len(allow) == 1 and {(a["index"], a["value"], a["op"]) for a in allow[0]["args"]} == {
            (i, v, "SCMP_CMP_EQ") for i, v in SELF_ONLY[name]
        }
    ((prlimit, new_arg),) = READ_ONLY_ON_OTHERS.items()
    allow = [r["args"] for r in _rules(out, prlimit) if r["action"] == "SCMP_ACT_ALLOW"]
    assert sorted(a[0]["index"] for a in allow) == [0, new_arg]
    # denied by the default (migrate_pages) or allowed only with a capability the sandbox lacks: kept
    assert _rules(out, "migrate_pages") == [DEFAULT["syscalls"][0]]
    assert not any(r["action"] == "SCMP_ACT_ALLOW" for r in _rules(out, "migrate_pages"))
    assert out["defaultAction"] == "SCMP_ACT_ERRNO" and out["defaultErrnoRet"] == 38


def test_profile_is_written_once_atomically_and_a_missing_default_is_one_line(tmp_path):
    src = tmp_path / "seccomp.json"
    src.write_text(json.dumps(DEFAULT))
    (tmp_path / "root").mkdir()
    a = write_profile(tmp_path / "root", src)
    assert write_profile(a.parent, src) == a and json.loads(a.read_text())["syscalls"]
    assert [p.name for p in a.parent.iterdir() if p.name.endswith(".tmp")] == []
    with pytest.raises(SandboxUnavailableError) as e:
        default_profile((tmp_path / "none.json", Path("/nonexistent/seccomp.json")))
    assert "containers-common" in str(e.value) and "\n" not in str(e.value)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(SandboxUnavailableError, match="cannot be read"):
        write_profile(tmp_path, bad)
