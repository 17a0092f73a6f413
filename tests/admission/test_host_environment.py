"""The host system under a host-path task is part of its admission (issue 34): an upgrade is drift, not silence.

The parser is checked against dpkg itself on this machine; a verdict made on another host system is no
verdict (the gate says which system it was made on), and ``tasks regress`` names the packages that moved.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparring.admission.gate import admission_judge_version, verdicts
from sparring.sandbox.hostenv import (
    DPKG_STATUS,
    HostEnvironment,
    current_host_environment,
    describe_change,
    host_environment,
    parse_dpkg_status,
    parse_os_release,
    remember_snapshot,
)
from sparring.tasks.loader import ADMISSION_FILE, load_task
from sparring.tasks.template import new_task

EXE = Path(sys.executable).parent / "sparring"
HAS_DPKG = Path("/", DPKG_STATUS).exists() and shutil.which("dpkg-query") is not None


@pytest.mark.skipif(not HAS_DPKG, reason="needs a Debian host (dpkg)")
def test_the_parser_lists_what_dpkg_says_is_installed():
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${db:Status-Status} ${Package}:${Architecture}=${Version}\\n"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    want = sorted({line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("installed ")})
    got = host_environment().packages
    assert len(got) > 50 and list(got) == want


name = st.from_regex(r"[a-z0-9][a-z0-9+.-]{0,20}", fullmatch=True)
version = st.from_regex(r"[0-9][A-Za-z0-9.+~:-]{0,15}", fullmatch=True)
stanza = st.tuples(name, st.sampled_from(["amd64", "all", "arm64"]), version, st.booleans(), st.booleans())


@given(st.lists(stanza, max_size=12))
def test_parse_dpkg_status_round_trip(stanzas):
    text = ""
    for pkg, arch, ver, installed, with_desc in stanzas:
        status = "install ok installed" if installed else "deinstall ok config-files"
        desc = "Description: a thing\n Package: fake:continuation\n .\n more\n" if with_desc else ""
        text += f"Package: {pkg}\nStatus: {status}\nArchitecture: {arch}\nVersion: {ver}\n{desc}\n"
    want = sorted({f"{p}:{a}={v}" for p, a, v, inst, _ in stanzas if inst})
    assert list(parse_dpkg_status(text)) == want


def test_os_release_and_a_moved_package_change_the_id_and_are_named(tmp_path):
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text('NAME="Debian"\nID=debian\nVERSION_ID="12"\n')
    status = root / DPKG_STATUS
    status.parent.mkdir(parents=True)
    base = "Package: libfoo1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 1.0-1\n\n"
    status.write_text(base + "Package: bar\nStatus: install ok installed\nArchitecture: all\nVersion: 2\n")
    before = host_environment(root)
    assert before.os == "debian 12" and before.packages == ("bar:all=2", "libfoo1:amd64=1.0-1")
    status.write_text(
        base.replace("1.0-1", "1.0-2") + "Package: baz\nStatus: install ok installed\nVersion: 3\n"
    )
    after = host_environment(root)
    assert after.id != before.id
    assert describe_change(before, after) == [
        "bar:all 2 -> (none)",
        "baz: (none) -> 3",
        "libfoo1:amd64 1.0-1 -> 1.0-2",
    ]
    (root / "etc" / "os-release").write_text("ID=debian\nVERSION_ID=13\n")
    assert host_environment(root).id != after.id and parse_os_release("NAME=x\n") == "unknown"


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SPARRING_ALLOW_UNADMITTED"}
    env["SPARRING_ADMISSION_CACHE"] = str(tmp_path / "cache")
    env["SPARRING_HOSTENV_CACHE"] = str(tmp_path / "hostenv")
    return env


def test_a_verdict_made_on_another_host_system_is_re_checked_and_regress_names_the_packages(
    tmp_path, monkeypatch
):
    t = new_task(tmp_path / "tasks" / "wc")
    env = _env(tmp_path)
    r = subprocess.run(
        [str(EXE), "tasks", "check", t.path, "--json", "--repeats", "2"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert r.returncode == 0, r.stderr
    rec = json.loads((t.path / ADMISSION_FILE).read_text())
    now = current_host_environment()
    assert rec["ok"] and rec["host"]["id"] == now.id and rec["host"]["packages"] == len(now.packages)

    monkeypatch.setenv("SPARRING_ADMISSION_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("SPARRING_HOSTENV_CACHE", str(tmp_path / "hostenv"))
    monkeypatch.delenv("SPARRING_ALLOW_UNADMITTED", raising=False)
    (v,) = verdicts([load_task(t.path)])
    assert v.ok is True  # positive control: same bytes, same judge, same host system

    # The same record, made on a host where one package had another version (its snapshot kept).
    moved = list(now.packages)
    name, _, ver = moved[0].partition("=")
    moved[0] = f"{name}={ver}+old1"
    then = HostEnvironment(now.os, now.python, tuple(sorted(moved)), now.package_source)
    remember_snapshot(then)
    rec["host"] = then.brief()
    (t.path / ADMISSION_FILE).write_text(json.dumps(rec))
    (v,) = verdicts([load_task(t.path)])
    assert v.ok is None and "checked on another host system" in v.line() and now.summary() in v.line()
    assert rec["judge_version"] == admission_judge_version()

    r = subprocess.run(
        [str(EXE), "tasks", "regress", t.path, "--json"], capture_output=True, text=True, env=_env(tmp_path)
    )
    assert r.returncode == 1, r.stderr
    (changed,) = json.loads(r.stdout)["changed"]
    assert f"host system: {name} {ver}+old1 -> {ver}" in changed["changes"]
