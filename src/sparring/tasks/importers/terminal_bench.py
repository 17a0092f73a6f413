"""The ``terminal-bench`` importer (alias ``harbor``): Terminal-bench and Harbor task directories.

Two layouts, told apart by their metadata file::

    Terminal-bench (task.yaml)            Harbor (task.toml)
    task.yaml   instruction, difficulty,  instruction.md
                max_agent_timeout_sec,    task.toml    [metadata] difficulty, [agent] timeout_sec,
                max_test_timeout_sec                   [verifier] timeout_sec, [environment] cpus,
                                                       memory_mb
    Dockerfile (docker-compose.yaml)      environment/Dockerfile (build context environment/)
    solution.sh                           solution/solve.sh
    run-tests.sh, tests/test_*.py         tests/test.sh, tests/test_*.py

Each becomes a task of family ``terminal``:

    instruction        the task's prompt; the Dockerfile's work directory (say /app)
                       reads /workspace in it, in the tests and in the solution
    Dockerfile         mapped by :mod:`.dockerfile`: its COPYs are the workspace, its
                       pinned pip installs the environment; what cannot map is refused
    tests/             hidden/: the pytest files the judge runs in a fresh sandbox over
                       the agent's final workspace (test.sh / run-tests.sh only install
                       and start pytest, which the judge does itself)
    solution script    run once here, in a sandbox over the workspace: the files it
                       leaves are solution/ (admission scores them); the same command,
                       ``bash -c SCRIPT``, is the oracle's one ``bash`` call (solution/.tool_calls.json)
    difficulty         easy / medium / hard -> tier 1 / 2 / 3
    timeouts           agent timeout -> limits.wall_s, test timeout -> judge.timeout_s

The path given is one task directory or a directory of them; every task is checked
(and its solution run) before anything is written.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import shlex
import shutil
import tempfile
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sparring import pyast
from sparring.errors import TaskError
from sparring.sandbox.base import SandboxBackend, SandboxSpec
from sparring.tasks import taskfs
from sparring.tasks.environment import alayer_for, resolve
from sparring.tasks.importers.batch import Draft, Files, RecordErrors, write_drafts
from sparring.tasks.importers.dockerfile import Mapped, map_dockerfile, workspace_files
from sparring.tasks.loader import SOLUTION_CALLS, Task
from sparring.tasks.spec import Environment, JudgeSpec, Limits, Provenance, TaskSpec

FAMILY = "terminal"
IMPORTER = "import/terminal-bench"
WORKSPACE = "/workspace"
TIERS = {"easy": 1, "medium": 2, "hard": 3}
PRIVATE = frozenset({"tests", "solution", "solution.sh", "solution.yaml", "run-tests.sh", "task.yaml",
                     "task.toml", "instruction.md", "Dockerfile", "docker-compose.yaml", "docker-compose.yml"})  # fmt: skip
"""Entries of a task directory the agent never sees, even where the Dockerfile copies the whole context."""
SOLUTION_TIMEOUT_S = 600.0
MAX_WALL_S = 7200.0


@dataclass
class Source:
    """One task directory, read: its layout's fields before any mapping."""

    root: Path
    layout: str
    instruction: str
    difficulty: str = ""
    agent_timeout_s: float | None = None
    test_timeout_s: float | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    tags: list[str] = field(default_factory=list)
    dockerfile: Path | None = None
    context: Path | None = None
    solution: Path | None = None


def is_task_dir(d: Path) -> bool:
    return (d / "task.yaml").is_file() or ((d / "task.toml").is_file() and (d / "instruction.md").is_file())


def _num(v: Any, what: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or v <= 0:
        raise TaskError(f"{what} must be a positive number, got {v!r}")
    return float(v)


def _memory_mb(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, int | float) and not isinstance(v, bool):
        return int(v)
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([MG])i?B?\s*", str(v), re.IGNORECASE)
    if not m:
        raise TaskError(f"environment memory {v!r} is not a size (2048, '2G', '512M')")
    return int(float(m.group(1)) * (1024 if m.group(2).upper() == "G" else 1))


def _compose(root: Path) -> None:
    """A docker-compose file may only build this task's one container from its Dockerfile."""
    for name in ("docker-compose.yaml", "docker-compose.yml"):
        f = root / name
        if not f.is_file():
            continue
        try:
            data = yaml.safe_load(_text(root, name)) or {}
        except yaml.YAMLError as e:
            raise TaskError(f"{name} is not valid YAML ({str(e).splitlines()[0]})") from None
        services = data.get("services") or {}
        if not isinstance(services, dict) or len(services) > 1:
            extra = sorted(services)[1:] if isinstance(services, dict) else ["?"]
            raise TaskError(f"{name}: service {extra[0]!r} is not supported (one container only: the task's)")
        for sname, svc in services.items():
            if isinstance(svc, dict) and "build" not in svc:
                raise TaskError(f"{name}: service {sname!r} runs a prebuilt image, which cannot run here")


def _text(root: Path, rel: str) -> str:
    """A file of the imported task as text, read without following a link (a dataset's link to a host
    file must not become an instruction, a test or a solution)."""
    data = taskfs.read_file(root, rel)
    if data is None:
        raise TaskError(f"{rel} is not a regular file of {root} (links are not followed)")
    return data.decode()


def read_source(root: Path) -> Source:
    """A task directory in either layout; TaskError naming what is missing or malformed."""
    if (root / "task.yaml").is_file():
        try:
            meta = yaml.safe_load(_text(root, "task.yaml")) or {}
        except yaml.YAMLError as e:
            raise TaskError(f"task.yaml is not valid YAML ({str(e).splitlines()[0]})") from None
        if not isinstance(meta, dict):
            raise TaskError("task.yaml is not a mapping")
        if "descriptions" in meta and "instruction" not in meta:
            descs = meta["descriptions"]
            base = (
                [d for d in descs if isinstance(d, dict) and d.get("key") == "base"]
                if isinstance(descs, list)
                else []
            )
            meta["instruction"] = base[0].get("description") if base else None
        _compose(root)
        if (root / "solution.yaml").is_file() and not (root / "solution.sh").is_file():
            raise TaskError("solution.yaml (a list of terminal commands) is not supported: ship solution.sh")
        src = Source(root, "terminal-bench", str(meta.get("instruction") or ""),
                     difficulty=str(meta.get("difficulty") or ""),
                     agent_timeout_s=_num(meta.get("max_agent_timeout_sec"), "max_agent_timeout_sec"),
                     test_timeout_s=_num(meta.get("max_test_timeout_sec"), "max_test_timeout_sec"),
                     tags=[str(t) for t in meta.get("tags") or []],
                     dockerfile=root / "Dockerfile", context=root, solution=root / "solution.sh")  # fmt: skip
    else:
        try:
            meta = tomllib.loads(_text(root, "task.toml"))
        except tomllib.TOMLDecodeError as e:
            raise TaskError(f"task.toml is not valid TOML ({e})") from None
        md, agent, ver, env = (meta.get(k) or {} for k in ("metadata", "agent", "verifier", "environment"))
        env_dir = root / "environment"
        if (env_dir / "docker-compose.yaml").is_file() or (env_dir / "docker-compose.yml").is_file():
            _compose(env_dir)
        src = Source(root, "harbor", _text(root, "instruction.md"),
                     difficulty=str(md.get("difficulty") or ""),
                     agent_timeout_s=_num(agent.get("timeout_sec"), "[agent] timeout_sec"),
                     test_timeout_s=_num(ver.get("timeout_sec"), "[verifier] timeout_sec"),
                     cpus=_num(env.get("cpus"), "[environment] cpus"),
                     memory_mb=_memory_mb(env.get("memory_mb", env.get("memory"))),
                     tags=[str(t) for t in md.get("tags") or []],
                     dockerfile=env_dir / "Dockerfile", context=env_dir, solution=root / "solution" / "solve.sh")  # fmt: skip
    if not src.instruction.strip():
        raise TaskError(f"{src.layout} task has no instruction")
    if src.solution is None or not src.solution.is_file():
        raise TaskError(
            f"no solution script ({src.solution.relative_to(root) if src.solution else 'solution.sh'})"
        )
    return src


def _test_ids(rel: str, source: str) -> list[str]:
    """Every test of a pytest file (functions, and methods of Test classes); parametrised tests refused."""
    try:
        tree = pyast.parse(source, filename=rel)
    except SyntaxError as e:
        raise TaskError(f"tests/{rel} does not parse ({e.msg}, line {e.lineno})") from None

    def check(fn: ast.FunctionDef | ast.AsyncFunctionDef, tid: str) -> str:
        for d in fn.decorator_list:
            if "parametrize" in ast.unparse(d):
                raise TaskError(
                    f"tests/{tid} is parametrised, which is not supported (write one test per case)"
                )
        return tid

    ids = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
            ids.append(check(node, f"{rel}::{node.name}"))
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            ids += [check(m, f"{rel}::{node.name}::{m.name}") for m in node.body
                    if isinstance(m, ast.FunctionDef | ast.AsyncFunctionDef) and m.name.startswith("test")]  # fmt: skip
    return ids


def _rewrite(text: str, workdir: str) -> str:
    """The work directory's absolute path as /workspace (tests, solution and prompt say /app; Sparring /workspace)."""
    if workdir in ("/", WORKSPACE):
        return text
    return re.sub(
        re.escape(workdir.rstrip("/")) + r"(?=[/\s'\"`:;,)]|$)", WORKSPACE, text, flags=re.MULTILINE
    )


def hidden_files(src: Source, workdir: str) -> tuple[Files, list[str]]:
    """(hidden/ files, test ids) from tests/: pytest files rewritten for /workspace, other files as data."""
    tests = src.root / "tests"
    if not tests.is_dir():
        raise TaskError("no tests/ directory")
    files: Files = {}
    ids: list[str] = []
    for rel, data in sorted(taskfs.files(tests).items()):  # regular files only: no link is read through
        name = rel.rsplit("/", 1)[-1]
        if rel in ("test.sh", "run-tests.sh") or "__pycache__" in rel:
            continue
        if name.endswith(".py"):
            text = _rewrite(data.decode(), workdir)
            files[rel] = text
            if name.startswith("test_") or name.endswith("_test.py"):
                ids += _test_ids(rel, text)
        else:
            files[rel] = data
    if not ids:
        raise TaskError(
            "tests/ has no pytest test (test_*.py): Sparring's judge runs pytest tests, not test.sh"
        )
    return files, ids


def solution_command(script: str) -> str:
    """The shell command that runs the solution script under bash (the ``bash`` tool runs ``sh -c``)."""
    return "bash -c " + shlex.quote(script)


def built_image(src: Source) -> tuple[str, str, Files]:
    """Build the task's Dockerfile with buildah (its ``RUN`` steps really run: images.builder) into the
    image store, from a copy of the build context without the task's private entries (its tests and
    solution can never be in the image). Returns the image pinned by digest, its work directory and
    the files there (the workspace: what the COPY and RUN steps left, links not followed)."""
    from sparring.errors import ImageError
    from sparring.images.builder import build
    from sparring.images.store import ImageStore

    assert src.dockerfile is not None and src.context is not None
    tag = f"sparring-import/{spec_id(src.root)}:latest"
    store = ImageStore()
    with tempfile.TemporaryDirectory(prefix="sparring-tb-ctx-") as tmp:
        ctx = Path(tmp) / "context"
        shutil.copytree(src.context, ctx, symlinks=True,
                        ignore=lambda d, names: [n for n in names if Path(d) == src.context and n in PRIVATE])  # fmt: skip
        shutil.copyfile(src.dockerfile, Path(tmp) / "Dockerfile")
        try:
            rec = build(store, ctx, tag, dockerfile=Path(tmp) / "Dockerfile", quiet=True)
        except ImageError as e:
            raise TaskError(f"{src.dockerfile.name}: {e}") from None
    workdir = rec.config.working_dir or "/"
    root = store.rootfs(rec) / workdir.strip("/")
    files: Files = dict(taskfs.files(root)) if workdir.strip("/") and root.is_dir() else {}
    files = {k: v for k, v in files.items() if "__pycache__/" not in k}
    return f"{tag}@{rec.digest}", workdir, files


async def run_solution(backend: SandboxBackend, workspace: Files, command: str, env: Environment,
                       limits: Limits) -> tuple[dict[str, bytes], list[str]]:  # fmt: skip
    """The files ``command`` (the oracle's one ``bash`` call) leaves in a sandbox over ``workspace``
    (bytecode left out), and the paths it deletes; TaskError with its output's tail if it fails."""
    layer = await alayer_for(env)
    with tempfile.TemporaryDirectory(prefix="sparring-tb-") as tmp:
        ws = Path(tmp) / "workspace"
        ws.mkdir()
        for rel, data in workspace.items():
            (ws / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / rel).write_bytes(data.encode() if isinstance(data, str) else data)
        spec = SandboxSpec(workspace=ws, environment=layer.ref(), image=env.image, network="none", memory_mb=limits.memory_mb,
                           pids=limits.pids, cpus=limits.cpus, disk_mb=limits.disk_mb)  # fmt: skip
        sb = await backend.create(spec)
        try:
            r = await sb.exec(["sh", "-c", command], timeout=min(limits.wall_s, SOLUTION_TIMEOUT_S))
            if r.timed_out or r.exit_code != 0:
                tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
                why = "timed out" if r.timed_out else f"exited {r.exit_code}"
                raise TaskError(f"the solution script {why} in the sandbox: {tail[0][:200]}")
            diff = await sb.diff()
        finally:
            await sb.close()
    if diff.flags:
        raise TaskError(
            f"the solution's workspace cannot be read back ({', '.join(diff.flags)}: {diff.detail})"
        )
    files = {k: v for k, v in diff.files.items() if "__pycache__/" not in k and not k.endswith(".pyc")}
    return files, list(diff.deleted)


def spec_id(root: Path) -> str:
    return f"{FAMILY}-" + (re.sub(r"[^a-z0-9.]+", "-", root.name.lower()).strip("-.") or "task")


def task_draft(src: Source, backend: SandboxBackend, build: bool = False) -> Draft:
    """The task a directory becomes (its solution run in a sandbox); TaskError naming what cannot map.
    ``build``: the Dockerfile is built with buildah (:func:`built_image`) and the task runs on that
    image, pinned by digest; otherwise it is mapped (:mod:`.dockerfile`) onto a Python layer."""
    assert src.dockerfile is not None and src.context is not None and src.solution is not None
    if not src.dockerfile.is_file():
        raise TaskError(f"no {src.dockerfile.relative_to(src.root)}: the environment must be a Dockerfile")
    base = "?"
    if build:
        image, workdir, workspace = built_image(src)
        env = Environment(image=image)
        base = image
    else:
        m: Mapped = map_dockerfile(src.dockerfile)
        workdir, base = m.workdir, m.base or "?"
        workspace = dict(workspace_files(m, src.context, PRIVATE if src.context == src.root else frozenset()))
        try:
            requirements = list(resolve(Environment(requirements=["pytest", *m.requirements])))
        except TaskError as e:
            raise TaskError(f"{src.dockerfile.name}: {e}") from None
        env = Environment(requirements=requirements)
    hidden, ids = hidden_files(src, workdir)
    wall = min(src.agent_timeout_s or 900.0, MAX_WALL_S)
    limits = Limits(max_steps=50, wall_s=wall, exec_timeout_s=min(120.0, wall), memory_mb=src.memory_mb or 2048,
                    cpus=src.cpus or 1.0, disk_mb=512)  # fmt: skip
    command = solution_command(_rewrite(_text(src.solution.parent, src.solution.name), workdir))
    files, deleted = asyncio.run(run_solution(backend, workspace, command, env, limits))
    if not files and not deleted:
        raise TaskError("the solution script changes nothing in the work directory")
    solution: Files = {**files, SOLUTION_CALLS: json.dumps([{"name": "bash", "arguments": {"command": command}}],
                                                          indent=1) + "\n"}  # fmt: skip
    instruction = _rewrite(src.instruction.strip(), workdir) + (
        f"\n\nWork in {WORKSPACE} (the current directory). When you are done, submit."
    )
    success = (f"The hidden tests ({len(ids)}) pass when run against the final state of {WORKSPACE}, "
               "with nothing outside it relied on.")  # fmt: skip
    spec = TaskSpec.model_validate({
        "id": spec_id(src.root), "family": FAMILY, "instruction": instruction, "success_criteria": success,
        "limits": limits,
        "judge": JudgeSpec(hidden_tests=ids, weights={"all_pass": 1.0}, timeout_s=src.test_timeout_s or 120.0),
        "difficulty": TIERS.get(src.difficulty.lower(), 2),
        "tags": [FAMILY, "imported", src.layout, *src.tags],
        "provenance": Provenance(generator=IMPORTER, source=f"{src.layout}:{src.root.name} (FROM {base})"),
        "environment": env,
    })  # fmt: skip
    return Draft(spec, workspace, hidden, solution, deleted)


def task_dirs(path: Path) -> list[Path]:
    """``path`` if it is a task directory, else its task subdirectories (sorted)."""
    path = Path(path)
    if not path.is_dir():
        raise TaskError(f"not a directory: {path} (pass a task directory or a directory of them)")
    if is_task_dir(path):
        return [path]
    dirs = [d for d in sorted(path.iterdir()) if d.is_dir() and is_task_dir(d)]
    if not dirs:
        raise TaskError(
            f"no task directories under {path} (each holds task.yaml, or task.toml and instruction.md)"
        )
    return dirs


def import_terminal_bench(path: Path, out: Path, *, backend: SandboxBackend, limit: int | None = None,
                          build: bool = False) -> list[Task]:  # fmt: skip
    """Import Terminal-bench / Harbor task directories into out/<task id>/: all, or (naming every bad
    task) none. ``build``: each Dockerfile is built with buildah, the task pinned to the image."""
    dirs = task_dirs(path)[:limit]
    problems: list[str] = []
    drafts: list[Draft] = []
    for d in dirs:
        try:
            drafts.append(task_draft(read_source(d), backend, build))
        except TaskError as e:
            problems.append(f"{d.name}: {e}")
    if problems:
        raise RecordErrors(problems, len(dirs), "task directories")
    return write_drafts(drafts, out)
