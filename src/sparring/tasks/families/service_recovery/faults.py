"""Fault kinds of the service-recovery family: each breaks a healthy ledger deployment in its files.

A deployment is a dict of workspace files (path -> text). The healthy one is
built by :mod:`.generator`; each fault here returns the broken copy. Faults
touch different lines or files, so any subset combines. What a fault leaves
must be representable in a workspace diff (contents and deletions: no modes,
no processes), because the judge rebuilds the agent's final state from it in a
fresh sandbox; so a "killed worker" is the lock it left behind, "disk full"
and "inode exhaustion" are the service's own spool quotas (bytes and files)
filled by stale temporary files, "permissions" a run directory on a read-only
filesystem. The reference fix is the healthy deployment itself.
"""

from __future__ import annotations

import gzip
import random
from collections.abc import Callable
from dataclasses import dataclass

Files = dict[str, str | bytes]
INI = "etc/ledger.ini"
ENV = "etc/service.env"
LOG = "var/log/ledger.log"


@dataclass(frozen=True)
class Fault:
    name: str
    tier: int  # how hard it is to diagnose
    apply: Callable[[Files, random.Random, int], None]  # (files, rng, documented port) -> mutates files


def _replace(files: Files, path: str, old: str, new: str) -> None:
    text = files[path]
    assert isinstance(text, str) and old in text, (path, old)
    files[path] = text.replace(old, new, 1)


def wrong_port(files: Files, rng: random.Random, port: int) -> None:
    _replace(files, INI, f"port = {port}\n", f"port = {port + rng.randint(1, 60)}\n")


def config_syntax(files: Files, rng: random.Random, port: int) -> None:
    broken = rng.choice([("[log]\n", "[log\n"), ("max_kb = ", "max_kb: = = "), ("[misc]\n", "misc]\n")])
    _replace(files, INI, *broken)


def disk_full(files: Files, rng: random.Random, port: int) -> None:
    for _ in range(rng.randint(2, 4)):
        files[f"var/spool/upload-{rng.randrange(16**6):06x}.tmp"] = "x" * (40 * 1024 + rng.randint(0, 999))


def inode_exhaustion(files: Files, rng: random.Random, port: int) -> None:
    for i in range(rng.randint(130, 180)):
        files[f"var/spool/sess-{i:04d}.tmp"] = f"{rng.randrange(10**6)}\n"


def stale_pid(files: Files, rng: random.Random, port: int) -> None:
    files["run/ledger.pid"] = f"{rng.randint(300, 30000)}\n"


def killed_worker(files: Files, rng: random.Random, port: int) -> None:
    files["run/worker.lock"] = f"{rng.randint(300, 30000)}\n"


def permissions(files: Files, rng: random.Random, port: int) -> None:
    _replace(
        files,
        ENV,
        "LEDGER_RUN_DIR=run\n",
        f"LEDGER_RUN_DIR={rng.choice(['/etc/ledger', '/usr/lib/ledger'])}\n",
    )


def missing_env(files: Files, rng: random.Random, port: int) -> None:
    env = files[ENV]
    assert isinstance(env, str)
    zone = next(line for line in env.splitlines() if line.startswith("LEDGER_ZONE="))
    _replace(files, ENV, zone + "\n", "")


def deleted_dependency(files: Files, rng: random.Random, port: int) -> None:
    del files["app/lib/ledgerfmt.py"]


def log_rotation(files: Files, rng: random.Random, port: int) -> None:
    # The healthy state is the rotated one: the old log compressed to ledger.log.1.gz, a fresh ledger.log.
    old = files.pop(LOG + ".1.gz")
    assert isinstance(old, bytes)
    files[LOG] = gzip.decompress(old).decode()


def wrong_data_path(files: Files, rng: random.Random, port: int) -> None:
    _replace(
        files,
        INI,
        "data = data/ledger.json\n",
        f"data = data/{rng.choice(['ledger.json.old', 'ledger-v1.json'])}\n",
    )


FAULTS: dict[str, Fault] = {
    f.name: f
    for f in (
        Fault("wrong_port", 1, wrong_port),
        Fault("config_syntax", 1, config_syntax),
        Fault("disk_full", 2, disk_full),
        Fault("inode_exhaustion", 2, inode_exhaustion),
        Fault("stale_pid", 1, stale_pid),
        Fault("killed_worker", 2, killed_worker),
        Fault("permissions", 2, permissions),
        Fault("missing_env", 1, missing_env),
        Fault("deleted_dependency", 2, deleted_dependency),
        Fault("log_rotation", 2, log_rotation),
        Fault("wrong_data_path", 1, wrong_data_path),
    )
}
