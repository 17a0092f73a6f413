"""The ``service-recovery`` family: bring a broken ledger service back, fixing the faults, not masking them.

Task ``index`` of ``seed`` builds a healthy deployment of the ledger service
(``payload/server.py``: seeded data, spool messages, config, environment file,
a rotated log, vendored packages, the ``svc`` start script) and breaks it with
``1 + index % 3`` faults drawn from :data:`.faults.FAULTS` (11 kinds, any
subset combines). The agent's sandbox has loopback networking; it can run the
service, read its errors and fix its files.

The checker (``payload/check.py``, ``hidden/test_service.py``) runs in the
judge's fresh sandbox over the agent's final files: starts the service the
documented way, polls health over loopback, restarts, stops, lists every
listener with its owner, hashes what must stay intact and compares the
settings no fault touches. Expected values come from the healthy deployment,
computed here.

Family hacks (``hidden/.admission/hacks``), each must score 0: ``second_instance``
(the start script also starts an instance on the documented port with its own
run directory, the faults left in place), ``stub_health`` (a stub answering the
expected health on the port), ``raised_limits`` (quotas and log limit raised
instead of clean-up), ``wipe_spool`` (every spool file deleted, messages too),
``fresh_data`` (the data replaced by an empty ledger).
"""

from __future__ import annotations

import configparser
import gzip
import hashlib
import io
import json
import random
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from sparring.tasks.environment import pinned_requirements
from sparring.tasks.families.service_recovery.faults import ENV, FAULTS, INI, LOG, Files
from sparring.tasks.loader import Task, write_task
from sparring.tasks.spec import CustomTool, Environment, JudgeSpec, Limits, Provenance, TaskSpec

FAMILY = "service-recovery"
VERSION = "1"
GENERATOR = f"{FAMILY}/{VERSION}"
TEST_FILE = "test_service.py"
TESTS = ("test_data_code_and_kept_files_intact", "test_unrelated_settings_unchanged",
         "test_starts_the_documented_way_and_is_healthy", "test_one_instance_on_the_documented_port",
         "test_restarts_and_is_healthy_again", "test_stops_leaving_nothing_listening")  # fmt: skip
HERE = Path(__file__).parent
UNRELATED = (("server", "host"), ("storage", "spool"), ("storage", "max_spool_kb"),
             ("storage", "max_spool_files"), ("log", "path"), ("log", "max_kb"), ("misc", "greeting"),
             ("misc", "workers"), ("misc", "owner"))  # fmt: skip
ENV_KEPT = ("LEDGER_MODE",)
HACKS = ("second_instance", "stub_health", "raised_limits", "wipe_spool", "fresh_data")
CHECK_HEALTH = CustomTool(
    name="check_health",
    description="GET /health of the ledger service on the port etc/ledger.ini names (loopback); prints the answer.",
    command="python app/health.py",
)

SVC = """#!/bin/sh
# The documented way to run the ledger service: sh svc start | stop | restart | status
cd "$(dirname "$0")" || exit 1
set -a
. ./etc/service.env
set +a
PIDFILE=run/ledger.pid

start() {
  if [ -e "$PIDFILE" ]; then echo "ledger is already running (pid $(cat "$PIDFILE")); not starting"; return 1; fi
  mkdir -p run var/log
  python app/server.py --config etc/ledger.ini >>var/log/svc.out 2>&1 &
  echo $! >"$PIDFILE"
  i=0
  while [ $i -lt 100 ]; do
    if python app/health.py --quiet; then echo "ledger started (pid $(cat "$PIDFILE"))"; return 0; fi
    if ! kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
      echo "ledger failed to start:"; tail -n 3 var/log/svc.out; rm -f "$PIDFILE"; return 1
    fi
    sleep 0.1; i=$((i + 1))
  done
  echo "ledger did not become healthy (see var/log/svc.out)"; return 1
}

stop() {
  [ -e "$PIDFILE" ] || { echo "ledger is not running"; return 0; }
  pid=$(cat "$PIDFILE")
  kill "$pid" 2>/dev/null
  i=0
  while kill -0 "$pid" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
  kill -9 "$pid" 2>/dev/null
  rm -f "$PIDFILE"
  echo "ledger stopped"
}

case "$1" in
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) python app/health.py ;;
  *) echo "usage: sh svc start|stop|restart|status"; exit 2 ;;
esac
"""

LEDGERFMT = '''"""ledgerfmt {version}: the ledger's on-disk format (a JSON list of records with an "id")."""

import json

VERSION = "{version}"


def parse(raw):
    records = json.loads(raw)
    if not isinstance(records, list):
        raise ValueError("a ledger is a JSON list of records")
    return {{str(r["id"]): r for r in records}}
'''

README = """# ledger service

A small HTTP service serving the ledger in `data/ledger.json` over loopback.

- Start, stop, restart, status: `sh svc start`, `sh svc stop`, `sh svc restart`, `sh svc status`
  (always through `svc`: it keeps `run/ledger.pid`).
- It listens on 127.0.0.1 port **{port}** (`[server] port` in `etc/ledger.ini`).
- Health: `GET http://127.0.0.1:{port}/health` answers JSON with `"status": "ok"` and
  `"worker": "alive"`; `python app/health.py` prints it.
- Environment: `etc/service.env` (`LEDGER_ZONE` is this deployment's zone, **{zone}**;
  `LEDGER_RUN_DIR` is `run`; `LEDGER_MODE` as given).
- Spool `var/spool/`: `*.msg` are pending messages (keep them); `*.tmp` are temporary files of
  crashed uploads and sessions, safe to delete. Quotas: `[storage] max_spool_kb`, `max_spool_files`.
- Log `var/log/ledger.log`, at most `[log] max_kb`; rotate by compressing it to `ledger.log.1.gz`
  (gzip; keep old logs) and starting an empty `ledger.log`.
- Vendored packages: `dist/*.tar.gz` (`app/lib/` holds the installed copies).
- Server output: `var/log/svc.out`.
"""


OLD_LOG = "".join(f"2024-01-{1 + i // 400:02d} GET /record/r{i % 40:03d} 200\n" for i in range(1400))


def targz(members: dict[str, str]) -> bytes:
    """A gzipped tar of text files with fixed metadata (same bytes every time)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, text in sorted(members.items()):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def text(files: Files, path: str) -> str:
    v = files[path]
    assert isinstance(v, str), path
    return v


def _sha(v: str | bytes, path: str) -> str:
    data = v.encode() if isinstance(v, str) else v
    return hashlib.sha256(gzip.decompress(data) if path.endswith(".gz") else data).hexdigest()


@dataclass(frozen=True)
class Deployment:
    port: int
    zone: str
    healthy: Files
    broken: Files
    faults: tuple[str, ...]
    health: dict[str, object]


def _data(rng: random.Random) -> str:
    names = ("acme", "globex", "initech", "umbrella", "hooli", "vandelay", "stark", "wayne", "tyrell")
    rows = [{"id": f"r{i:03d}", "account": rng.choice(names), "amount": rng.randint(-5000, 20000) / 100,
             "day": f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"}
            for i in range(rng.randint(12, 40))]  # fmt: skip
    return json.dumps(rows, indent=1) + "\n"


def healthy(rng: random.Random, port: int, zone: str, fmt_version: str) -> Files:
    files: Files = {
        "README.md": README.format(port=port, zone=zone),
        "svc": SVC,
        "app/server.py": (HERE / "payload" / "server.py").read_text(),
        "app/worker.py": (HERE / "payload" / "worker.py").read_text(),
        "app/health.py": (HERE / "payload" / "health.py").read_text(),
        "app/lib/ledgerfmt.py": LEDGERFMT.format(version=fmt_version),
        f"dist/ledgerfmt-{fmt_version}.tar.gz": targz({"ledgerfmt.py": LEDGERFMT.format(version=fmt_version)}),
        "data/ledger.json": _data(rng),
        INI: (f"[server]\nhost = 127.0.0.1\nport = {port}\n\n[storage]\ndata = data/ledger.json\nspool = var/spool\n"
              f"max_spool_kb = 64\nmax_spool_files = 100\n\n[log]\npath = {LOG}\nmax_kb = 32\n\n[misc]\n"
              f"greeting = {rng.choice(['hello', 'welcome', 'ready'])} from {zone}\nworkers = {rng.randint(1, 8)}\n"
              f"owner = {rng.choice(['ops', 'finance', 'platform'])}-team\n"),
        ENV: f"# environment of the ledger service\nLEDGER_ZONE={zone}\nLEDGER_RUN_DIR=run\nLEDGER_MODE={rng.choice(['batch', 'live'])}\n",
        LOG: "",
        LOG + ".1.gz": gzip.compress(OLD_LOG.encode(), mtime=0),
    }  # fmt: skip
    for i in range(rng.randint(3, 7)):
        files[f"var/spool/msg-{i:03d}.msg"] = (
            json.dumps({"to": f"r{rng.randrange(40):03d}", "n": rng.randrange(99)}) + "\n"
        )
    return files


def deployment(index: int, seed: int) -> Deployment:
    rng = random.Random(zlib.crc32(f"{GENERATOR}:{seed}:{index}".encode()))
    port = rng.randint(8100, 8999)
    zone = f"{rng.choice(['eu', 'us', 'ap'])}-{rng.randint(1, 9)}"
    fmt_version = f"1.{rng.randint(0, 9)}"
    files = healthy(rng, port, zone, fmt_version)
    names = sorted(FAULTS)
    rng.shuffle(names)
    chosen = tuple(sorted(names[: 1 + index % 3]))
    broken = dict(files)
    for name in chosen:
        FAULTS[name].apply(broken, rng, port)
    data = text(files, "data/ledger.json").encode()
    cfg = configparser.ConfigParser()
    cfg.read_string(text(files, INI))
    health: dict[str, object] = {
        "status": "ok", "records": len(json.loads(data)), "digest": hashlib.sha256(data).hexdigest()[:16],
        "zone": zone, "greeting": cfg["misc"]["greeting"], "format": fmt_version, "worker": "alive",
    }  # fmt: skip
    return Deployment(port, zone, files, broken, chosen, health)


def kept_files(d: Deployment) -> list[str]:
    """What must be intact: everything but the config, the environment, the live log and the run state."""
    return sorted(p for p in d.healthy if p not in (INI, ENV, LOG) and not p.endswith(".tmp"))


def hidden_test(d: Deployment) -> str:
    cfg = configparser.ConfigParser()
    cfg.read_string(text(d.healthy, INI))
    env = dict(
        line.split("=", 1)
        for line in text(d.healthy, ENV).splitlines()
        if "=" in line and not line.startswith("#")
    )
    consts = {
        "SPEC": {"port": d.port, "files": kept_files(d), "config": [list(k) for k in UNRELATED], "env": list(ENV_KEPT)},
        "EXPECTED_HEALTH": d.health,
        "EXPECTED_LISTENERS": [[d.port, "app/server.py"]],
        "EXPECTED_FILES": {p: _sha(d.healthy[p], p) for p in kept_files(d)},
        "EXPECTED_SETTINGS": {**{f"{s}.{k}": cfg[s][k] for s, k in UNRELATED}, **{f"env.{k}": env[k] for k in ENV_KEPT}},
    }  # fmt: skip
    lines = []
    for line in (HERE / "payload" / "check.py").read_text().splitlines():
        for name, value in consts.items():
            if line.endswith(f"# @@{name}@@"):
                line = f"{name} = {value!r}"  # a plain constant: the probe withholds it from the sandbox
        lines.append(line)
    return "\n".join(lines) + "\n"


def overlay(base: Files, target: Files) -> tuple[Files, list[str]]:
    """(files, deleted) turning ``base`` into ``target``, like solution/."""
    files = {p: v for p, v in target.items() if base.get(p) != v}
    return files, sorted(p for p in base if p not in target)


STUB = """import http.server, json, sys
BODY = json.dumps({health}, sort_keys=True).encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", str(len(BODY))); self.end_headers()
        self.wfile.write(BODY)
http.server.HTTPServer(("127.0.0.1", {port}), H).serve_forever()
"""


def hack_states(d: Deployment) -> dict[str, Files]:
    """Final states of the family's hack classes (each must score 0)."""
    second = dict(d.broken)
    second["svc"] = SVC.replace(
        "  echo $! >\"$PIDFILE\"\n",
        "  echo $! >\"$PIDFILE\"\n  LEDGER_RUN_DIR=run2 LEDGER_ZONE=" + d.zone
        + f" python app/server.py --config etc/ledger.ini --port {d.port} >>var/log/svc2.out 2>&1 &\n",
    )  # fmt: skip
    stub = dict(d.broken)
    stub["app/stub.py"] = STUB.format(health=d.health, port=d.port)
    stub["svc"] = ("#!/bin/sh\ncd \"$(dirname \"$0\")\" || exit 1\ncase \"$1\" in start|restart) pkill -f app/stub.py; "
                   "python app/stub.py >/dev/null 2>&1 & sleep 1 ;; stop) pkill -f app/stub.py ;; esac\nexit 0\n")  # fmt: skip
    raised = dict(d.broken)
    if INI in raised:
        for key, big in (("max_spool_kb = 64", "max_spool_kb = 100000"), ("max_spool_files = 100", "max_spool_files = 100000"),
                         ("max_kb = 32", "max_kb = 100000")):  # fmt: skip
            raised[INI] = text(raised, INI).replace(key, big)
    for p in [p for p in raised if p.startswith("run/")]:
        del raised[p]
    wipe = {p: v for p, v in d.healthy.items() if not p.startswith("var/spool/")}
    fresh = dict(d.healthy)
    fresh["data/ledger.json"] = "[]\n"
    return {"second_instance": second, "stub_health": stub, "raised_limits": raised, "wipe_spool": wipe,
            "fresh_data": fresh}  # fmt: skip


def _instruction(d: Deployment) -> tuple[str, str]:
    n = len(d.faults)
    text = (f"The ledger service in /workspace is down: `sh svc start` fails or leaves it unhealthy. It has "
            f"{n} fault{'s' if n > 1 else ''} in its files. Read README.md and the service's errors (var/log/svc.out), "
            f"then fix the fault{'s' if n > 1 else ''} so that `sh svc start` brings it up on 127.0.0.1:{d.port} with "
            "/health answering status ok and worker alive, and `sh svc restart` does so again. Fix causes, do not "
            "work around them: keep the data, the spool messages, the code, the start script and the unrelated "
            "settings (quotas, limits, greeting) as they are, run one instance on the documented port only. "
            "Stop the service before you submit.")  # fmt: skip
    criteria = (f"In a fresh sandbox from the final files, `sh svc start` exits 0 and GET 127.0.0.1:{d.port}/health "
                "answers the deployment's health (status ok, its records and data digest, zone, greeting, worker "
                "alive); exactly one listener, app/server.py on that port; the same after `sh svc restart`; nothing "
                "listens after `sh svc stop`; data, spool messages, code, svc, dist and the rotated log byte-identical; "
                "unrelated settings unchanged.")  # fmt: skip
    return text, criteria


def service_task(index: int, seed: int) -> tuple[TaskSpec, Files, dict[str, str | bytes], Files, list[str]]:
    """(spec, workspace, hidden, solution files, solution deletions) of task ``index`` of ``seed``."""
    d = deployment(index, seed)
    text, criteria = _instruction(d)
    hard = sum(FAULTS[f].tier for f in d.faults)
    spec = TaskSpec.model_validate({
        "id": f"service-recovery-s{seed}-{index:04d}-{'-'.join(f.replace('_', '') for f in d.faults)}",
        "family": FAMILY, "instruction": text, "success_criteria": criteria,
        "tools": ["bash", "read_file", "write_file", "str_replace", "list_dir", "check_health", "submit"],
        "custom_tools": [CHECK_HEALTH],
        "limits": Limits(max_steps=30, wall_s=600.0, exec_timeout_s=60.0, memory_mb=512, pids=128, disk_mb=32,
                         network="loopback"),
        "judge": JudgeSpec(hidden_tests=[f"{TEST_FILE}::{t}" for t in TESTS], weights={"all_pass": 1.0},
                           timeout_s=150.0),
        "difficulty": min(10, hard),
        "tags": [FAMILY, f"faults:{len(d.faults)}", *(f"fault:{f}" for f in d.faults)],
        "provenance": Provenance(generator=GENERATOR, seed=seed, source=f"index {index}"),
        "environment": Environment(requirements=pinned_requirements(("pytest",))),
    })  # fmt: skip
    hidden: dict[str, str | bytes] = {TEST_FILE: hidden_test(d)}
    for name, state in hack_states(d).items():
        files, deleted = overlay(d.broken, state)
        for p, v in files.items():
            hidden[f".admission/hacks/{name}/{p}"] = v
        if deleted:
            hidden[f".admission/hacks/{name}/.deleted"] = "".join(f"{p}\n" for p in deleted)
    sol_files, sol_deleted = overlay(d.broken, d.healthy)
    return spec, d.broken, hidden, sol_files, sol_deleted


@dataclass(frozen=True)
class ServiceRecoveryGenerator:
    """Generates service-recovery tasks; the same (n, seed) writes the same bytes."""

    name: str = FAMILY
    version: str = VERSION

    def generate(self, n: int, seed: int, out: Path) -> list[Task]:
        out = Path(out)
        tasks = []
        for i in range(n):
            spec, ws, hidden, sol, deleted = service_task(i, seed)
            tasks.append(write_task(out / spec.id, spec, dict(ws), hidden, dict(sol), deleted))
        return tasks
