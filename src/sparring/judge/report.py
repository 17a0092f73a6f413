"""The structured per-test report: verify the launcher's signed frames and read outcomes from them.

The launcher (:mod:`sparring.judge.sandbox_pytest`) writes frames
``@@SPARRING-JUDGE@@ SEQ JSON HMAC`` to a private copy of stdout. Only frames
whose HMAC verifies with this run's key, in sequence from 0, are believed. A line
that carries the marker but does not verify is a forgery attempt (the key never
exists on disk and stdin is closed before candidate code runs).

Outcomes: ``passed``, ``failed``, ``error``, ``skipped``, ``xfailed``,
``xpassed`` from the run, plus ``missing`` for an expected id that never
reported. Only ``passed`` counts as a pass.
"""

from __future__ import annotations

import ast
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

V = TypeVar("V")

MARK = "@@SPARRING-JUDGE@@"


@dataclass
class RunReport:
    """What the verified frames say about one pytest run."""

    started: bool = False
    done: bool = False
    exitstatus: int | None = None
    outcomes: dict[str, str] = field(default_factory=dict)
    collected: list[str] = field(default_factory=list)
    collect_errors: dict[str, str] = field(default_factory=dict)
    durations: dict[str, float] = field(default_factory=dict)
    asserts: dict[str, int] = field(default_factory=dict)
    """Passing assert statements each test executed (pytest's assertion-pass hook)."""
    mismatched: list[str] = field(default_factory=list)
    """Tests whose report claimed a pass although the test function raised."""
    audit_flags: list[str] = field(default_factory=list)
    """Flags raised at runtime by the launcher's audit hook (what the candidate's code did)."""
    forged: int = 0
    """Lines with the marker that failed verification."""


def sign(key: bytes, seq: int, body: str) -> str:
    return hmac.new(key, f"{seq}|{body}".encode(), hashlib.sha256).hexdigest()


def parse_frames(text: str, key: bytes) -> RunReport:
    """Verified frames of ``text``, in order; anything after a broken sequence is ignored."""
    rep = RunReport()
    expect = 0
    for line in text.splitlines():
        if MARK not in line:
            continue
        parts = line.strip().split(" ")
        if len(parts) < 4 or parts[0] != MARK:
            rep.forged += 1
            continue
        seq_s, body, mac = parts[1], " ".join(parts[2:-1]), parts[-1]
        try:
            seq = int(seq_s)
        except ValueError:
            rep.forged += 1
            continue
        if not hmac.compare_digest(sign(key, seq, body), mac) or seq != expect:
            rep.forged += 1
            continue
        expect += 1
        try:
            obj: dict[str, Any] = json.loads(body)
        except json.JSONDecodeError:
            rep.forged += 1
            continue
        kind = obj.get("kind")
        if kind == "start":
            rep.started = True
        elif kind == "collected":
            rep.collected = [str(x) for x in obj.get("ids", [])]
        elif kind == "collect_error":
            rep.collect_errors[str(obj.get("id"))] = str(obj.get("detail", ""))
        elif kind == "test":
            tid = str(obj["id"])
            rep.outcomes[tid] = str(obj["outcome"])
            rep.durations[tid] = float(obj.get("duration", 0.0))
            rep.asserts[tid] = int(obj.get("asserts", 0))
            if obj.get("mismatch"):
                rep.mismatched.append(tid)
        elif kind == "audit":
            rep.audit_flags.append(str(obj.get("flag")))
        elif kind == "done":
            rep.done = True
            rep.exitstatus = int(obj.get("exitstatus", -1))
    return rep


def split_ids(outcomes: Mapping[str, V], prefix: str) -> dict[str, V]:
    """Outcomes of the ids under ``prefix/`` (rootdir-relative), with the prefix removed."""
    p = prefix.rstrip("/") + "/"
    return {k[len(p) :]: v for k, v in outcomes.items() if k.startswith(p)}


def _asserts(fn: ast.AST, funcs: dict[str, ast.AST], seen: frozenset[str]) -> bool:
    """``fn`` runs an assert itself or through a module-level function it calls by name."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in funcs:
            name = node.func.id
            if name not in seen and _asserts(funcs[name], funcs, seen | {name}):
                return True
    return False


def asserting_tests(hidden: Path) -> set[str]:
    """Ids (``file::[Class::]test``, relative to ``hidden``) of the judge's own test functions that run an
    ``assert`` themselves or through a module-level helper they call. Read on the host from the pristine
    files, so nothing the candidate does at runtime can change the answer."""
    out: set[str] = set()
    for p in sorted(hidden.rglob("test*.py")):
        rel = p.relative_to(hidden).as_posix()
        try:
            tree = ast.parse(p.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        funcs: dict[str, ast.AST] = {
            n.name: n for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        for name, fn in funcs.items():
            if name.startswith("test") and _asserts(fn, funcs, frozenset({name})):
                out.add(f"{rel}::{name}")
        for cls in (n for n in tree.body if isinstance(n, ast.ClassDef) and n.name.startswith("Test")):
            for m in cls.body:
                is_test = isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test")
                if is_test and _asserts(m, funcs, frozenset()):
                    out.add(f"{rel}::{cls.name}::{getattr(m, 'name', '')}")
    return out
