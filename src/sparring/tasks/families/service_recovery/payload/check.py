"""The service-recovery family's hidden test: runs INSIDE the judge's fresh sandbox, over the agent's final files.

The generator writes this module's source as ``hidden/test_service.py`` with the
``# @@NAME@@`` lines replaced by the task's constants (the expected values stay
on the host: the judge's probe withholds them). One scenario, run once:

1. hash the files that must be intact (data, spool messages, code, the start
   script, vendored packages, a rotated log) and parse the settings unrelated
   to the faults (a raised quota or another port is a masked fault, not a fix);
2. start the service the documented way (``sh svc start``), poll its health over
   loopback, list every listening socket with the script that owns it (a second
   instance, a stub on the port, a forwarder all show up here);
3. restart it the documented way and check the same again;
4. stop it: nothing may still listen.
"""

import configparser
import contextlib
import functools
import gzip
import hashlib
import http.client
import json
import os
import signal
import subprocess
import time

SPEC = {"port": 0, "files": [], "config": [], "env": []}  # @@SPEC@@
EXPECTED_HEALTH: dict = {}  # @@EXPECTED_HEALTH@@
EXPECTED_LISTENERS: list = []  # @@EXPECTED_LISTENERS@@
EXPECTED_FILES: dict = {}  # @@EXPECTED_FILES@@
EXPECTED_SETTINGS: dict = {}  # @@EXPECTED_SETTINGS@@

WORKSPACE = "/workspace"
SVC_TIMEOUT_S = 40


def _read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def svc(command):
    try:
        r = subprocess.run(["sh", "svc", command], cwd=WORKSPACE, capture_output=True, timeout=SVC_TIMEOUT_S,
                           stdin=subprocess.DEVNULL)  # fmt: skip
        return r.returncode
    except subprocess.TimeoutExpired:
        return "timeout"


def health(wait_s=10.0):
    deadline = time.monotonic() + wait_s
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", SPEC["port"], timeout=2)  # never through a proxy
            conn.request("GET", "/health")
            r = conn.getresponse()
            body = r.read().decode()
            if r.status == 200:
                return json.loads(body)
            raise OSError(f"HTTP {r.status}")
        except Exception:
            if time.monotonic() > deadline:
                return None
            time.sleep(0.1)


def _socket_owners():
    owners = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            argv = _read(f"/proc/{pid}/cmdline", "rb").decode(errors="replace").split("\0")
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        script = next((a for a in argv[1:] if a and not a.startswith("-")), argv[0])
        script = "/".join(script.split("/")[-2:])
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:["):
                owners[link[8:-1]] = script
    return owners


def listeners():
    """Every listening TCP socket as [port, the script of the process holding it], sorted."""
    owners = _socket_owners()
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = _read(table).splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A":
                out.append([int(f[1].rsplit(":", 1)[1], 16), owners.get(f[9], "?")])
    return sorted(out)


def file_hashes():
    out = {}
    for rel in SPEC["files"]:
        try:
            data = _read(os.path.join(WORKSPACE, rel), "rb")
            if rel.endswith(".gz"):  # compressed by any gzip: what counts is the content kept
                data = gzip.decompress(data)
            out[rel] = hashlib.sha256(data).hexdigest()
        except (OSError, EOFError, gzip.BadGzipFile):
            out[rel] = None
    return out


def settings():
    """The settings no fault touches: parsed values of the config and the environment file."""
    cfg = configparser.ConfigParser()
    try:
        cfg.read(os.path.join(WORKSPACE, "etc", "ledger.ini"))
        ini = {f"{s}.{k}": cfg.get(s, k, fallback=None) for s, k in SPEC["config"]}
    except configparser.Error:
        ini = {f"{s}.{k}": None for s, k in SPEC["config"]}
    env = {}
    try:
        for line in _read(os.path.join(WORKSPACE, "etc", "service.env")).splitlines():
            if "=" in line and not line.lstrip().startswith("#"):
                k, v = line.split("=", 1)
                env[k.strip()] = v.strip()
    except OSError:
        pass
    return {**ini, **{f"env.{k}": env.get(k) for k in SPEC["env"]}}


def _reap():
    """Nothing the scenario started outlives it (processes of this sandbox only)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        if int(pid) in (os.getpid(), os.getppid()):
            continue
        try:
            cmd = _read(f"/proc/{pid}/cmdline", "rb")
        except OSError:
            continue
        if b"app/" in cmd:  # the service, its worker, anything the candidate's svc started from app/
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)


@functools.lru_cache(maxsize=1)
def scenario():
    out = {"files": file_hashes(), "settings": settings()}
    try:
        out["start"] = svc("start")
        out["health"] = health()
        out["listeners"] = listeners()
        out["restart"] = svc("restart")
        out["health_after_restart"] = health()
        out["listeners_after_restart"] = listeners()
        out["stop"] = svc("stop")
        deadline = time.monotonic() + 5
        while listeners() and time.monotonic() < deadline:
            time.sleep(0.1)
        out["listeners_after_stop"] = listeners()
    finally:
        _reap()
    return out


def test_data_code_and_kept_files_intact():
    assert scenario()["files"] == EXPECTED_FILES


def test_unrelated_settings_unchanged():
    assert scenario()["settings"] == EXPECTED_SETTINGS


def test_starts_the_documented_way_and_is_healthy():
    assert scenario()["start"] == 0
    assert scenario()["health"] == EXPECTED_HEALTH


def test_one_instance_on_the_documented_port():
    assert scenario()["listeners"] == EXPECTED_LISTENERS


def test_restarts_and_is_healthy_again():
    assert scenario()["restart"] == 0
    assert scenario()["health_after_restart"] == EXPECTED_HEALTH
    assert scenario()["listeners_after_restart"] == EXPECTED_LISTENERS


def test_stops_leaving_nothing_listening():
    assert scenario()["stop"] == 0
    assert scenario()["listeners_after_stop"] == []
