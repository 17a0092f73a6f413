"""Health probe of the ledger service: runs INSIDE a sandbox as ``app/health.py``.

Reads the port from etc/ledger.ini and GETs /health over loopback; prints the answer, exits 0 on HTTP 200.
``--quiet`` prints nothing (``./svc`` polls with it).
"""

import configparser
import http.client
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
cfg = configparser.ConfigParser()
try:
    cfg.read(os.path.join(ROOT, "etc", "ledger.ini"))
    port = int(cfg["server"]["port"])
except (configparser.Error, KeyError, ValueError) as e:
    print(f"health: cannot read the port from etc/ledger.ini: {' '.join(str(e).split())}")
    sys.exit(1)
try:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)  # direct: never through a proxy
    conn.request("GET", "/health")
    r = conn.getresponse()
    body, code = r.read().decode(), r.status
except Exception as e:  # refused, 503, timeout: all mean unhealthy
    body, code = f"health: no healthy answer on 127.0.0.1:{port}: {e}", 0
if "--quiet" not in sys.argv:
    print(body)
sys.exit(0 if code == 200 else 1)
