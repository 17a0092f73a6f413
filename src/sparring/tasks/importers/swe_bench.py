"""The ``swe-bench`` importer: SWE-bench instances over repositories the user already has.

An instance (a JSONL, ``.jsonl.gz`` or Parquet row) names ``instance_id``, ``repo``,
``base_commit``, ``patch`` (the gold fix), ``test_patch``, ``FAIL_TO_PASS`` and
``PASS_TO_PASS`` (pytest node ids: lists, or the JSON-encoded strings SWE-bench
ships) and ``problem_statement``. The repository comes from ``--repos``: a git
repository (or a ``.tar.gz`` of one) used for every instance, or a directory
holding ``<owner>__<name>`` or ``<name>`` for each repo. Nothing is downloaded.

Each instance becomes a task of family ``swe-bench``::

    workspace/   the tree at base_commit, exported: no .git, no history, so no
                 object that holds the fix
    hidden/      test_<path>.py for each test file the ids name, as the test
                 patch leaves it, with only the named tests kept (the judge runs
                 those and nothing else); .admission/initial_outcomes.json: the
                 FAIL_TO_PASS ids must fail on the initial state, PASS_TO_PASS
                 ones pass (admission's ``initial_outcomes`` rule)
    solution/    the files the gold patch changes (.deleted: those it removes)

A hidden test file is renamed (``tests/test_x.py`` -> ``test_tests__test_x.py``) so
it never shadows the workspace's own copy, which the judge runs as a regression
test; ``judge.hidden_tests`` holds the renamed ids. The test patch may change only
the test files the ids name: anything else it touches would have to be in the
agent's workspace, and the agent must not see the test patch.

Every instance is checked before anything is written; the bad ones are one line
each (missing field, unknown repo, base commit not in the repository, a patch that
does not apply) and the import writes nothing.
"""

from __future__ import annotations

import ast
import io
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from sparring import pyast
from sparring.errors import ConfigError, TaskError
from sparring.tasks import taskfs
from sparring.tasks.environment import pinned_requirements
from sparring.tasks.importers.batch import Draft, Files, RecordErrors, write_drafts
from sparring.tasks.importers.rows import record_lines
from sparring.tasks.initial_outcomes import OUTCOMES_FILE
from sparring.tasks.loader import Task
from sparring.tasks.spec import Environment, JudgeSpec, Limits, Provenance, TaskSpec

FAMILY = "swe-bench"
IMPORTER = "import/swe-bench"
FIELDS = ("instance_id", "repo", "base_commit", "patch", "test_patch", "FAIL_TO_PASS", "PASS_TO_PASS",
          "problem_statement")  # fmt: skip
ARCHIVES = (".tar.gz", ".tgz")
GIT_TIMEOUT_S = 300
DIFFICULTY = {"<15 min fix": 1, "15 min - 1 hour": 2, "1-4 hours": 3, ">4 hours": 4}
"""SWE-bench Verified's ``difficulty`` annotation -> tier; instances without one get tier 2."""


@dataclass(frozen=True)
class Instance:
    """One validated SWE-bench instance."""

    instance_id: str
    repo: str
    base_commit: str
    patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    problem_statement: str
    version: str = ""
    environment_setup_commit: str = ""
    difficulty: int = 2

    @property
    def spec_id(self) -> str:
        return f"{FAMILY}-" + re.sub(r"[^a-z0-9.]+", "-", self.instance_id.lower()).strip("-.")


def _ids(raw: Any, name: str) -> tuple[str, ...]:
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError:
            raise TaskError(f"field {name!r} is neither a list nor a JSON-encoded list") from None
    if not isinstance(raw, list) or not all(isinstance(t, str) and t.strip() for t in raw):
        raise TaskError(f"field {name!r} must be a list of pytest node ids")
    for t in raw:
        path = t.split("::", 1)[0]
        p = PurePosixPath(path)
        if "::" not in t or not path.endswith(".py") or p.is_absolute() or ".." in p.parts:
            raise TaskError(f"field {name!r}: {t!r} is not a pytest node id (path/to/test_x.py::test_name)")
    return tuple(raw)


def validate_instance(raw: object) -> Instance:
    """An instance as :class:`Instance`; TaskError naming the bad field."""
    if not isinstance(raw, dict):
        raise TaskError(f"expected a JSON object with fields {', '.join(FIELDS)}")
    for name in FIELDS:
        if raw.get(name) is None:
            raise TaskError(f"missing field {name!r}")
    for name in ("instance_id", "repo", "base_commit", "patch", "test_patch", "problem_statement"):
        if not isinstance(raw[name], str) or not raw[name].strip():
            raise TaskError(f"field {name!r} must be a non-empty string")
    if not re.fullmatch(r"[0-9a-fA-F]{7,40}", raw["base_commit"]):
        raise TaskError(f"field 'base_commit' is not a commit hash: {raw['base_commit']!r}")
    f2p, p2p = _ids(raw["FAIL_TO_PASS"], "FAIL_TO_PASS"), _ids(raw["PASS_TO_PASS"], "PASS_TO_PASS")
    if not f2p:
        raise TaskError("field 'FAIL_TO_PASS' is empty: an instance needs a test the fix makes pass")
    both = sorted(set(f2p) & set(p2p))
    if both:
        raise TaskError(f"test {both[0]} is in both FAIL_TO_PASS and PASS_TO_PASS")
    inst = Instance(
        instance_id=raw["instance_id"].strip(), repo=raw["repo"].strip(), base_commit=raw["base_commit"],
        patch=raw["patch"], test_patch=raw["test_patch"], fail_to_pass=f2p, pass_to_pass=p2p,
        problem_statement=raw["problem_statement"].strip(), version=str(raw.get("version") or ""),
        environment_setup_commit=str(raw.get("environment_setup_commit") or ""),
        difficulty=DIFFICULTY.get(str(raw.get("difficulty") or ""), 2),
    )  # fmt: skip
    if inst.spec_id == f"{FAMILY}-":
        raise TaskError(f"field 'instance_id' has no letters or digits: {inst.instance_id!r}")
    return inst


# --------------------------------------------------------------------------- repositories


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    # safe.directory: an archive extracted as root keeps its owner's uid, which git would refuse.
    return subprocess.run(["git", "-c", "safe.directory=*", "-C", str(repo), *args], input=stdin,
                          capture_output=True, timeout=GIT_TIMEOUT_S, check=False)  # fmt: skip


def _is_repo_root(p: Path) -> bool:
    """``p`` is a repository itself (not merely a directory inside one)."""
    if not p.is_dir():
        return False
    r = _git(p, "rev-parse", "--show-toplevel")
    return r.returncode == 0 and Path(r.stdout.decode().strip()).resolve() == p.resolve()


class Repos:
    """Where each instance's repository is: one repository for all, or a directory of them by name.

    Archives are extracted once, into a directory removed by :meth:`close`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        if not self.root.exists():
            raise TaskError(
                f"--repos {self.root} does not exist (pass a git repository or a directory of them)"
            )
        self._scratch = Path(tempfile.mkdtemp(prefix="sparring-swe-repos-"))
        self._found: dict[Path, Path] = {}

    def close(self) -> None:
        shutil.rmtree(self._scratch, ignore_errors=True)

    def _single(self) -> Path | None:
        if self.root.name.endswith(ARCHIVES) and self.root.is_file():
            return self._open(self.root)
        return self.root if _is_repo_root(self.root) else None

    def locate(self, repo: str) -> Path:
        """The git repository of ``repo`` (``owner/name``); TaskError saying where it was looked for."""
        single = self._single()
        if single is not None:
            return single
        owner_name = repo.replace("/", "__")
        name = repo.rsplit("/", 1)[-1]
        for stem in dict.fromkeys((owner_name, name)):
            d = self.root / stem
            if d.is_dir():
                if not _is_repo_root(d):
                    raise TaskError(f"{d} is not a git repository")
                return d
            for ext in ARCHIVES:
                if (self.root / f"{stem}{ext}").is_file():
                    return self._open(self.root / f"{stem}{ext}")
        raise TaskError(
            f"unknown repo {repo!r}: no {owner_name} or {name} (a git repository or .tar.gz) in {self.root}"
        )

    def _open(self, archive: Path) -> Path:
        if archive in self._found:
            return self._found[archive]
        dest = self._scratch / f"a{len(self._found)}"
        try:
            with tarfile.open(archive) as tf:
                tf.extractall(dest, filter="data")
        except (tarfile.TarError, OSError) as e:
            raise TaskError(f"{archive.name}: not a readable .tar.gz ({e})") from None
        tops = list(dest.iterdir())
        repo = tops[0] if len(tops) == 1 and tops[0].is_dir() and not (dest / ".git").exists() else dest
        if not _is_repo_root(repo):
            raise TaskError(f"{archive.name} holds no git repository (archive the repository with its .git)")
        self._found[archive] = repo
        return repo


# --------------------------------------------------------------------------- trees and patches


def export_tree(repo: Path, commit: str, dest: Path) -> None:
    """The tree of ``commit`` written to ``dest``: files only, no .git, so no history reaches the agent."""
    if _git(repo, "cat-file", "-e", f"{commit}^{{commit}}").returncode != 0:
        raise TaskError(f"base commit {commit} is not in the repository {repo}")
    r = _git(repo, "archive", "--format=tar", commit)
    if r.returncode != 0:
        raise TaskError(f"git archive {commit} failed: {r.stderr.decode(errors='replace').strip()[:200]}")
    with tarfile.open(fileobj=io.BytesIO(r.stdout)) as tf:
        tf.extractall(dest, filter="data")


def read_tree(root: Path) -> dict[str, bytes]:
    """Every regular file under ``root`` (posix relative path -> bytes); symbolic links are left out."""
    return {p.relative_to(root).as_posix(): p.read_bytes()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()}  # fmt: skip


def apply_patch(tree: Path, patch: str, what: str) -> None:
    """Apply a unified diff to the files under ``tree`` (git apply outside any repository)."""
    text = patch if patch.endswith("\n") else patch + "\n"
    r = subprocess.run(["git", "apply", "--whitespace=nowarn", "-"], cwd=tree, input=text.encode(),
                       capture_output=True, timeout=GIT_TIMEOUT_S, check=False,
                       env={"PATH": "/usr/bin:/bin", "GIT_CEILING_DIRECTORIES": str(tree.parent)})  # fmt: skip
    if r.returncode != 0:
        why = r.stderr.decode(errors="replace").strip().splitlines()
        raise TaskError(f"{what} does not apply to the base commit: {why[0] if why else 'git apply failed'}")


def changed(before: dict[str, bytes], after: dict[str, bytes]) -> tuple[dict[str, bytes], list[str]]:
    """(files added or changed, paths deleted) from ``before`` to ``after``."""
    files = {k: v for k, v in after.items() if before.get(k) != v}
    return files, sorted(set(before) - set(after))


# --------------------------------------------------------------------------- hidden tests


def hidden_name(rel: str) -> str:
    """The hidden file of a repository test file: ``tests/test_x.py`` -> ``test_tests__test_x.py``."""
    return "test_" + rel[: -len(".py")].replace("/", "__") + ".py"


def _span(node: ast.stmt) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    assert node.end_lineno is not None
    return first, node.end_lineno


def keep_only(source: bytes, rel: str, names: set[tuple[str, ...]]) -> bytes:
    """``source`` without the tests no id names, so the judge runs exactly the listed ones.

    ``names`` holds each listed test as its chain of names (``("test_f",)``, ``("TestC", "test_m")``;
    parametrised cases run all together, as one function). Top-level test functions and test classes
    nobody names are cut, and in a named class its unnamed test methods."""
    try:
        tree = pyast.parse(source, filename=rel)
    except (SyntaxError, ValueError) as e:
        raise TaskError(f"{rel} does not parse after the test patch ({e})") from None
    cut: list[tuple[int, int]] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            if (node.name,) not in names:
                cut.append(_span(node))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            methods = {c[1] for c in names if len(c) == 2 and c[0] == node.name}
            if not methods and not any(c[0] == node.name for c in names):
                cut.append(_span(node))
                continue
            tests = [m for m in node.body if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef)]
            cut += [_span(m) for m in tests if m.name.startswith("test") and m.name not in methods]
    lines = source.decode("utf-8", errors="surrogateescape").splitlines(keepends=True)
    for a, b in sorted(cut, reverse=True):
        indent = re.match(r"\s*", lines[a - 1]).group(0)  # type: ignore[union-attr]
        # A class left without its methods still needs a body: a ``pass`` at the cut's indentation.
        lines[a - 1 : b] = [f"{indent}pass\n"] if indent else []
    return "".join(lines).encode("utf-8", errors="surrogateescape")


def _chain(test_id: str) -> tuple[str, ...]:
    return tuple(p.split("[", 1)[0] for p in test_id.split("::")[1:])


def hidden_tests(inst: Instance, patched: dict[str, bytes]) -> tuple[Files, dict[str, str]]:
    """(hidden files, original id -> hidden id) for every listed test, from the test-patched tree."""
    by_file: dict[str, set[tuple[str, ...]]] = {}
    for t in (*inst.fail_to_pass, *inst.pass_to_pass):
        by_file.setdefault(t.split("::", 1)[0], set()).add(_chain(t))
    files: Files = {}
    for rel, names in sorted(by_file.items()):
        if rel not in patched:
            raise TaskError(
                f"test file {rel} (named by a test id) is not in the repository after the test patch"
            )
        files[hidden_name(rel)] = keep_only(patched[rel], rel, names)
    ids = {t: hidden_name(t.split("::", 1)[0]) + "::" + t.split("::", 1)[1]
           for t in (*inst.fail_to_pass, *inst.pass_to_pass)}  # fmt: skip
    return files, ids


# --------------------------------------------------------------------------- the task


def instance_task(inst: Instance, repo: Path, source: str) -> Draft:
    """The task an instance becomes; TaskError naming what is wrong with it."""
    with tempfile.TemporaryDirectory(prefix="sparring-swe-") as tmp:
        base_dir = Path(tmp) / "base"
        export_tree(repo, inst.base_commit, base_dir)
        return base_task(inst, base_dir, source, Environment(requirements=pinned_requirements()))


def image_task(inst: Instance, images: InstanceImages, source: str) -> Draft:
    """The task of an instance whose repository is in its own image (``images``): the workspace is
    the image's tree at ``images.workspace`` (no .git), the task pinned to the image's digest."""
    image, tree = images.pull(inst)
    with tempfile.TemporaryDirectory(prefix="sparring-swe-") as tmp:
        base_dir = Path(tmp) / "base"
        for rel, data in tree.items():
            (base_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            (base_dir / rel).write_bytes(data)
        base_dir.mkdir(exist_ok=True)
        return base_task(inst, base_dir, source, Environment(image=image, workspace=images.workspace))


def base_task(inst: Instance, base_dir: Path, source: str, env: Environment) -> Draft:
    """The task of an instance over ``base_dir`` (the repository at its base commit, files only)."""
    with tempfile.TemporaryDirectory(prefix="sparring-swe-") as tmp:
        base = read_tree(base_dir)
        gold_dir, test_dir = Path(tmp) / "gold", Path(tmp) / "test"
        shutil.copytree(base_dir, gold_dir, symlinks=True)
        shutil.copytree(base_dir, test_dir, symlinks=True)
        apply_patch(gold_dir, inst.patch, "the gold patch")
        apply_patch(test_dir, inst.test_patch, "the test patch")
        solution, deleted = changed(base, read_tree(gold_dir))
        patched = read_tree(test_dir)
    if not solution and not deleted:
        raise TaskError("the gold patch changes nothing")
    hidden, ids = hidden_tests(inst, patched)
    test_changes, test_deleted = changed(base, patched)
    named = {t.split("::", 1)[0] for t in ids}
    stray = sorted((set(test_changes) | set(test_deleted)) - named)
    if stray:
        raise TaskError(f"the test patch changes {stray[0]}, which no FAIL_TO_PASS/PASS_TO_PASS id names "
                        "(only the named test files reach the hidden tests)")  # fmt: skip
    outcomes = {
        "fail": {ids[t]: f"FAIL_TO_PASS test {t} of {inst.instance_id}" for t in inst.fail_to_pass},
        "pass": {ids[t]: f"PASS_TO_PASS test {t} of {inst.instance_id}" for t in inst.pass_to_pass},
    }
    hidden[OUTCOMES_FILE] = json.dumps(outcomes, indent=1, sort_keys=True) + "\n"
    n_f, n_p = len(inst.fail_to_pass), len(inst.pass_to_pass)
    instruction = (
        f"{inst.problem_statement}\n\n---\nThe workspace holds the repository {inst.repo} at commit "
        f"{inst.base_commit[:12]} (files only, without its history). Resolve the issue above by changing the "
        "repository's source code. Do not edit, add or delete tests or test configuration: hidden tests "
        "judge the result. Run the existing tests with run_tests if they help, then submit."
    )
    success = (
        f"{n_f} hidden test(s) that fail on the original code pass after your change, and {n_p} hidden "
        "test(s) that pass on it still pass, with the tests and test configuration unchanged."
    )
    spec = TaskSpec.model_validate({
        "id": inst.spec_id, "family": FAMILY, "instruction": instruction, "success_criteria": success,
        "limits": Limits(max_steps=50, wall_s=1800.0, exec_timeout_s=120.0, memory_mb=2048, disk_mb=1024),
        "judge": JudgeSpec(hidden_tests=[ids[t] for t in (*inst.fail_to_pass, *inst.pass_to_pass)],
                           weights={"all_pass": 1.0}, timeout_s=300.0),
        "difficulty": inst.difficulty,
        "tags": [FAMILY, "imported", inst.repo, *([f"version:{inst.version}"] if inst.version else []),
                 *([f"env-commit:{inst.environment_setup_commit[:12]}"] if inst.environment_setup_commit else [])],
        "provenance": Provenance(generator=IMPORTER, source=f"{source}:{inst.instance_id}@{inst.base_commit}"),
        "environment": env,
    })  # fmt: skip
    return Draft(spec, dict(base), hidden, dict(solution), deleted)


def read_instances(path: Path) -> list[tuple[str, Instance | str]]:
    """Each row as (where, instance) or (where, why it is not one)."""
    path = Path(path)
    if not path.is_file():
        raise TaskError(f"input file not found: {path} (pass a SWE-bench instances file)")
    out: list[tuple[str, Instance | str]] = []
    for n, text in record_lines(path):
        if not text.strip():
            continue
        where = f"{path.name} line {n}"
        try:
            raw = json.loads(text)
        except json.JSONDecodeError as e:
            out.append((where, f"invalid JSON ({e.msg} at column {e.colno})"))
            continue
        if isinstance(raw, dict) and isinstance(raw.get("instance_id"), str):
            where += f" ({raw['instance_id']})"
        try:
            out.append((where, validate_instance(raw)))
        except TaskError as e:
            out.append((where, str(e)))
    if not out:
        raise TaskError(f"{path.name}: no instances (expected one JSON object per line)")
    return out


# --------------------------------------------------------------------------- instance images


def image_name(template: str, instance_id: str) -> str:
    """``template`` with ``{instance_id}`` replaced the way SWE-bench names its instance images: lower
    case, ``__`` written ``_1776_`` (``django__django-11099`` -> ``django_1776_django-11099``)."""
    if "{instance_id}" not in template:
        raise ConfigError(
            f"--image-template {template!r} has no {{instance_id}} (e.g. 'REG/sweb.eval.x86_64.{{instance_id}}:latest')"
        )
    return template.replace("{instance_id}", instance_id.lower().replace("__", "_1776_"))


class InstanceImages:
    """One image per instance, named by a template, pulled through the image store and pinned by
    digest. A loopback registry is spoken to over plain HTTP (as ``image pull --insecure``)."""

    def __init__(self, template: str, workspace: str) -> None:
        from sparring.images.store import ImageStore

        image_name(template, "x")
        if not workspace.startswith("/") or ".." in workspace.split("/") or workspace.strip("/") == "":
            raise ConfigError(f"--image-workspace {workspace!r} must be an absolute directory in the image")
        self.template, self.workspace = template, "/" + workspace.strip("/")
        self.store = ImageStore()

    def pull(self, inst: Instance) -> tuple[str, dict[str, bytes]]:
        """(the image pinned as REF@sha256:..., the files of its workspace: no .git, no bytecode)."""
        from sparring.errors import SparringError
        from sparring.images.reference import is_loopback_host, parse
        from sparring.images.registry import pull

        name = image_name(self.template, inst.instance_id)
        try:
            res = pull(self.store, name, insecure=is_loopback_host(parse(name).registry))
        except SparringError as e:
            raise TaskError(f"image {name}: {e}") from None
        root = self.store.rootfs(res.record) / self.workspace.strip("/")
        if not root.is_dir() or root.is_symlink():
            raise TaskError(f"image {name} has no directory {self.workspace} (pass --image-workspace)")
        tree = {k: v for k, v in taskfs.files(root).items()
                if not k.startswith(".git/") and "__pycache__/" not in k and not k.endswith(".pyc")}  # fmt: skip
        pinned = name if parse(name).digest else f"{name}@{res.digest}"
        return pinned, tree


@contextmanager
def _repos(root: Path) -> Iterator[Repos]:
    r = Repos(root)
    try:
        yield r
    finally:
        r.close()


def import_swe_bench(path: Path, out: Path, *, repos: Path | None = None, limit: int | None = None,
                     image_template: str | None = None, image_workspace: str = "/testbed") -> list[Task]:  # fmt: skip
    """Import SWE-bench instances into out/<task id>/: all, or (naming every bad instance) none.
    Each repository comes from ``repos``, or with ``image_template`` from the instance's own image
    (its tree at ``image_workspace``; the task pinned to that image)."""
    images = InstanceImages(image_template, image_workspace) if image_template else None
    if images is None and repos is None:
        raise ConfigError("--format swe-bench needs --repos (git repositories) or --image-template (images)")
    rows = read_instances(path)
    if limit is not None:
        rows = rows[:limit]
    problems: list[str] = []
    drafts: list[Draft] = []
    with _repos(repos) if images is None and repos is not None else nullcontext() as found:
        for where, inst in rows:
            if isinstance(inst, str):
                problems.append(f"{where}: {inst}")
                continue
            try:
                if images is not None:
                    drafts.append(image_task(inst, images, Path(path).name))
                else:
                    assert found is not None
                    drafts.append(instance_task(inst, found.locate(inst.repo), Path(path).name))
            except TaskError as e:
                problems.append(f"{where}: {e}")
    if problems:
        raise RecordErrors(problems, len(rows), "instances")
    return write_drafts(drafts, out)
