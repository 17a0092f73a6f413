"""What the judge's pytest collects from a task's hidden/ folder, and whether the task lists it.

The judge runs every test file pytest collects under hidden/ (the training
split: hidden/ without hidden/eval/; the evaluation split: hidden/eval/, whose
expected ids are ``hidden/eval/expected_tests.txt``), but scores only the ids a
task lists. A test file nobody listed still runs, unscored, on every
judgement, and can flip admission rules by chance. So every collected test
file must have at least one listed id, and every listed id must name a test
that exists. Both are decided here from the files alone, before any test runs.

Collection mirrors the judge's pinned pytest: ``python_files = test_*.py
*_test.py`` at any depth, and pytest's default ``norecursedirs``, which skips
dot-directories (hidden/.admission/, the admission assets, among them).
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterable
from pathlib import Path

from sparring import pyast
from sparring.tasks import taskfs
from sparring.tasks.loader import Task

# The task layout of the evaluation split (owned here, in the task room; the judge reads it).
EVAL_DIR = "eval"
EVAL_IDS_FILE = "expected_tests.txt"

TEST_FILE_PATTERNS = ("test_*.py", "*_test.py")
NORECURSE_DIRS = ("*.egg", ".*", "_darcs", "build", "CVS", "dist", "node_modules", "venv", "{arch}")


def _skipped_dir(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pat) for pat in NORECURSE_DIRS)


def collected_test_files(root: Path) -> list[str]:
    """Test files pytest collects under ``root`` (posix paths relative to it): regular files, no link
    followed, no directory entered below one pytest skips."""

    def skipped(rel: str) -> bool:
        return any(_skipped_dir(part) for part in rel.split("/")[:-1])

    out = [e.rel for e, _ in taskfs.walk(root) if e.kind == "file" and not skipped(e.rel)
           and any(fnmatch.fnmatchcase(e.rel.rsplit("/", 1)[-1], pat) for pat in TEST_FILE_PATTERNS)]  # fmt: skip
    return sorted(out)


def eval_ids(task: Task) -> list[str] | None:
    """The evaluation judge's expected ids (relative to hidden/eval/); None when there is no such file."""
    data = taskfs.read_file(task.hidden, f"{EVAL_DIR}/{EVAL_IDS_FILE}")
    if data is None:
        return None
    text = data.decode("utf-8", "replace")
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]


def _file_of(test_id: str) -> str:
    return test_id.split("::", 1)[0]


def _bound_names(body: list[ast.stmt]) -> set[str] | None:
    """Names a module or class body binds; None when it may bind names no parser can see (``import *``)."""
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            for a in node.names:
                if a.name == "*":
                    return None
                names.add(a.asname or a.name.split(".")[0])
    return names


def _missing_name(tree: ast.Module, chain: list[str]) -> str | None:
    """The first name of ``Class::...::test`` the module surely does not define; None if all may exist."""
    body: list[ast.stmt] = tree.body
    for i, name in enumerate(chain):
        bound = _bound_names(body)
        if bound is None:
            return None
        if name not in bound:
            return name
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if cls is None or cls.bases or i == len(chain) - 1:
            return None  # inherited or built at runtime: only pytest can tell
        body = cls.body
    return None


def missing_listed(root: Path, ids: list[str]) -> list[str]:
    """Why each listed id (relative to ``root``) names no test: its file, or its function, is not there."""
    out: list[str] = []
    trees: dict[str, ast.Module | str] = {}
    for tid in ids:
        rel = _file_of(tid)
        data = taskfs.read_file(root, rel)
        if data is None:
            out.append(f"{tid}: no file {rel}")
            continue
        if rel not in trees:
            try:
                trees[rel] = pyast.parse(data, filename=rel)
            except (SyntaxError, ValueError) as e:
                trees[rel] = f"{type(e).__name__}: {e}"
        tree = trees[rel]
        if isinstance(tree, str):
            out.append(f"{tid}: {rel} does not parse ({tree})")
            continue
        chain = [p.split("[", 1)[0] for p in tid.split("::")[1:]]
        name = _missing_name(tree, chain) if chain else None
        if name is not None:
            out.append(f"{tid}: {rel} defines no {name}")
    return out


def listed_files(task: Task) -> set[str]:
    """Test files (relative to hidden/) with at least one listed id: hidden/eval/ ones by
    ``expected_tests.txt``, the others by ``judge.hidden_tests``."""
    train = {_file_of(t) for t in task.spec.judge.hidden_tests if not t.startswith(EVAL_DIR + "/")}
    return train | {f"{EVAL_DIR}/{_file_of(t)}" for t in eval_ids(task) or []}


def unlisted_files(task: Task, ran: Iterable[str]) -> list[str]:
    """Files of the test ids that ``ran`` (relative to hidden/, hidden/eval/ ones prefixed ``eval/``)
    that no listed id names: what a judge collected that :func:`listing_problems` did not foresee."""
    listed = listed_files(task)
    return sorted({_file_of(t) for t in ran} - listed)


def listing_problems(task: Task) -> list[str]:
    """Every way the task's listed ids and its collected hidden test files disagree (empty: they agree)."""
    out = [f"listed id {why}" for why in missing_listed(task.hidden, task.spec.judge.hidden_tests)]
    evals = eval_ids(task)
    if evals is not None:
        out += [f"hidden/{EVAL_DIR}/{EVAL_IDS_FILE} lists {why}"
                for why in missing_listed(task.hidden / EVAL_DIR, evals)]  # fmt: skip
    listed = listed_files(task)
    for rel in collected_test_files(task.hidden) if task.hidden.is_dir() else []:
        if rel in listed:
            continue
        if not rel.startswith(EVAL_DIR + "/"):
            out.append(f"hidden/{rel} runs unlisted: list its tests in judge.hidden_tests or delete it")
        elif evals is None:
            out.append(f"hidden/{rel} never runs: hidden/{EVAL_DIR}/ has no {EVAL_IDS_FILE} listing it")
        else:
            out.append(f"hidden/{rel} runs unlisted: list its tests in hidden/{EVAL_DIR}/{EVAL_IDS_FILE}")
    return out
