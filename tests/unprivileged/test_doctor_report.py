"""``sparring doctor`` reports what the sandbox itself detects, in the documented JSON schema, and
``sparring rollout`` says the fallbacks in force once at its start."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sparring.doctor import SCHEMA, checks
from sparring.sandbox.local.backend import LocalBackend

EXE = Path(sys.executable).parent / "sparring"
FIELDS = {"name", "group", "status", "detail", "fallback", "cost", "install", "required"}


def sp(*args: object, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "SPARRING_DEBUG"} | (env or {})
    return subprocess.run([str(EXE), *map(str, args)], capture_output=True, text=True, timeout=300, env=full)


def test_doctor_json_schema_and_agreement_with_the_backend(tmp_path):
    r = sp("doctor", "--json")
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout)
    assert rep["schema"] == SCHEMA and rep["user"]["uid"] == os.geteuid()
    assert sum(rep["summary"].values()) == len(rep["checks"])
    for c in rep["checks"]:
        assert set(c) == FIELDS and c["status"] in ("ok", "degraded", "missing"), c
        assert (c["status"] == "ok") == (c["fallback"] is None and c["cost"] is None) or c[
            "status"
        ] == "missing"
    by = {c["name"]: c for c in rep["checks"]}
    wanted = {"bubblewrap", "user namespaces", "overlayfs", "cgroups", "seccomp", "exec server",
              "podman/runc (OCI backend)", "disk for layers", "ray", "torch", "LibreOffice", "chromium"}  # fmt: skip
    assert wanted <= set(by)
    b = LocalBackend(root=tmp_path / "root")  # the same detection decides the backend's modes
    assert (by["overlayfs"]["status"] == "ok") == (b.mode == "overlay")
    assert (by["exec server"]["status"] == "ok") == (b.server_kind == "c")


def test_doctor_human_output_says_fallback_and_install(monkeypatch):
    r = sp("doctor", env={"SPARRING_CGROUPS": "off", "SPARRING_SANDBOX_MODE": "copy"})
    assert r.returncode == 0, r.stdout + r.stderr  # which required check was missing, and why
    lines = {ln.split(":")[0].split()[-1]: ln for ln in r.stdout.splitlines() if ":" in ln}
    assert "degraded" in lines["cgroups"] and "falls back to rlimits" in lines["cgroups"]
    assert "degraded" in lines["overlayfs"] and "copy-mode" in lines["overlayfs"]


def test_doctor_says_each_status_once_and_only_programs_something_runs():
    from sparring.tasks.families import FAMILIES

    r = sp("doctor")
    for ln in r.stdout.splitlines():
        status = ln.split()[0]
        assert ln.count(status + ":") == 0 and ln.split().count(status) == 1, ln
    assert set(checks.FAMILY_PROGRAMS.values()) <= set(FAMILIES)
    assert {p[0] for p in checks.PROGRAMS} == {
        "LibreOffice",
        "chromium",
    }  # no program of a family that does not exist


def test_degraded_lines_print_once(monkeypatch, capsys):
    from sparring.cli import doctor as doctor_cli

    monkeypatch.setenv("SPARRING_CGROUPS", "off")
    monkeypatch.setattr(doctor_cli, "_printed", False)
    doctor_cli.print_degraded_once()
    doctor_cli.print_degraded_once()
    err = capsys.readouterr().err
    assert err.count("degraded: cgroups") == 1, err
    assert {c.name for c in checks.sandbox_degradations()} >= {"cgroups"}


def test_rollout_prints_the_fallbacks_at_start(clamp_task, tmp_path):
    r = sp("rollout", "--tasks", clamp_task.path, "--policy", "oracle", "--store", tmp_path / "s.db",
           env={"SPARRING_CGROUPS": "off"})  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("degraded: cgroups") == 1, r.stderr
