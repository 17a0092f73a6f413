"""The ledger service: runs INSIDE a sandbox as ``app/server.py`` (started by ``./svc start``).

A small HTTP service over loopback serving a JSON ledger. It refuses to start,
with one line on stderr, whenever its environment is broken, which is what the
service-recovery family's faults do: a config it cannot parse, a dependency
missing, an environment variable unset, a run directory it may not write, a
spool over its byte quota or its file (inode) quota, an unrotated log over its
size limit, a stale lock of a killed worker, a data file that is not there.
It spawns one worker process (``app/worker.py``) whose liveness the health
endpoint reports, and stops it on SIGTERM.
"""

import configparser
import hashlib
import http.server
import json
import os
import signal
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def fail(msg):
    print(f"ledger: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


def load_config(path):
    cfg = configparser.ConfigParser()
    try:
        with open(path) as f:
            cfg.read_string(f.read())
        return cfg
    except (OSError, configparser.Error) as e:
        fail(f"cannot read config {path}: {' '.join(str(e).split())}")


def spool_check(cfg):
    spool = os.path.join(ROOT, cfg["storage"]["spool"])
    names = sorted(os.listdir(spool)) if os.path.isdir(spool) else []
    used = sum(os.path.getsize(os.path.join(spool, n)) for n in names)
    if used > int(cfg["storage"]["max_spool_kb"]) * 1024:
        fail(f"spool {spool} is full: {used // 1024} KB used of {cfg['storage']['max_spool_kb']} KB")
    if len(names) > int(cfg["storage"]["max_spool_files"]):
        fail(f"spool {spool} is out of inodes: {len(names)} files, limit {cfg['storage']['max_spool_files']}")


def open_log(cfg):
    path = os.path.join(ROOT, cfg["log"]["path"])
    if os.path.exists(path) and os.path.getsize(path) > int(cfg["log"]["max_kb"]) * 1024:
        fail(f"log {path} exceeds {cfg['log']['max_kb']} KB: rotate it (gzip the old log to {path}.1.gz)")
    try:
        return open(path, "a")
    except OSError as e:
        fail(f"cannot open log {path}: {e}")


def main(argv):
    config = argv[argv.index("--config") + 1] if "--config" in argv else "etc/ledger.ini"
    cfg = load_config(os.path.join(ROOT, config))
    sys.path.insert(0, os.path.join(ROOT, "app", "lib"))
    try:
        import ledgerfmt
    except ImportError:
        fail("missing dependency ledgerfmt (app/lib/ledgerfmt.py); vendored copies live in dist/")
    zone = os.environ.get("LEDGER_ZONE") or fail("LEDGER_ZONE is not set (etc/service.env)")
    run_dir = os.path.join(ROOT, os.environ.get("LEDGER_RUN_DIR", "run"))
    lock = os.path.join(run_dir, "worker.lock")
    if os.path.exists(lock):
        fail(f"worker lock {lock} is held (a worker that was killed leaves it behind)")
    try:
        os.makedirs(run_dir, exist_ok=True)
        with open(os.path.join(run_dir, "server.pid"), "w") as f:
            f.write(f"{os.getpid()}\n")
    except OSError as e:
        fail(f"cannot write to run directory {run_dir}: {e.strerror}")
    spool_check(cfg)
    log = open_log(cfg)
    data_path = os.path.join(ROOT, cfg["storage"]["data"])
    try:
        with open(data_path, "rb") as f:
            raw = f.read()
        records = ledgerfmt.parse(raw)
    except (OSError, ValueError) as e:
        fail(f"cannot load data {data_path}: {e}")
    port = int(argv[argv.index("--port") + 1]) if "--port" in argv else int(cfg["server"]["port"])
    worker = subprocess.Popen([sys.executable, os.path.join(ROOT, "app", "worker.py"), lock])
    health = {"status": "ok", "records": len(records), "digest": hashlib.sha256(raw).hexdigest()[:16],
              "zone": zone, "greeting": cfg["misc"]["greeting"], "format": ledgerfmt.VERSION}  # fmt: skip

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path == "/health":
                body = dict(health, worker="alive" if worker.poll() is None else "down")
                code = 200 if body["worker"] == "alive" else 503
            elif self.path.startswith("/record/"):
                key = self.path.split("/", 2)[2]
                body = records.get(key, {"error": "no such record"})
                code = 200 if key in records else 404
            else:
                body, code = {"error": "not found"}, 404
            out = json.dumps(body, sort_keys=True).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        def log_message(self, fmt, *args):
            log.write(f"{self.address_string()} {fmt % args}\n")
            log.flush()

    try:
        server = http.server.HTTPServer((cfg["server"]["host"], port), Handler)
    except OSError as e:
        worker.kill()
        fail(f"cannot listen on {cfg['server']['host']}:{port}: {e.strerror}")

    def stop(*_):
        worker.terminate()
        worker.wait()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    log.write(f"ledger listening on {port}\n")
    log.flush()
    server.serve_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
