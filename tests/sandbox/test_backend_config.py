"""Backends chosen by configuration: BackendConfig, make_backend, `--backend`, and the OCI backend
reached through the same Environment, running the task's pinned layer for the agent and the judge.

OCI tests need root, podman, runc and busybox-static (``make setup``), as tests/sandbox/test_oci.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import tomli_w
from pydantic import TypeAdapter, ValidationError

from sparring.env import Environment
from sparring.errors import ConfigError, SandboxError
from sparring.sandbox.config import (
    BackendConfig,
    LocalBackendConfig,
    OCIBackendConfig,
    backend_config,
    make_backend,
)
from sparring.sandbox.local.backend import LocalBackend
from sparring.sandbox.oci.backend import OCIBackend
from sparring.tasks.environment import layer_for
from sparring.tasks.loader import Task, load_task
from sparring.tasks.sandbox_spec import spec_for_task
from sparring.train.config import RLConfig
from tests_support import FIXED_CLAMP, make_clamp_task

SPARRING = str(Path(sys.executable).parent / "sparring")
PROBE = "python -c 'import sys, pytest; print(sys.prefix, pytest.__version__)'; python -c 'import sparring' 2>&1 | tail -1"


def cli(*args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([SPARRING, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env=os.environ.copy())  # fmt: skip


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    return make_clamp_task(tmp_path_factory.mktemp("cfg") / "tasks" / "clamp-bug")


def test_config_is_a_discriminated_union_that_forbids_unknown_options(tmp_path: Path) -> None:
    ta: TypeAdapter[LocalBackendConfig | OCIBackendConfig] = TypeAdapter(BackendConfig)
    assert ta.validate_python({"kind": "oci", "image": "x"}) == OCIBackendConfig(image="x")
    assert ta.validate_python({"kind": "local", "mode": "copy"}) == LocalBackendConfig(mode="copy")
    with pytest.raises(ValidationError):
        ta.validate_python({"kind": "local", "image": "x"})  # an OCI option on the local backend
    with pytest.raises(ValidationError):
        ta.validate_python({"kind": "docker"})
    with pytest.raises(ConfigError) as e:
        backend_config("docker")
    assert "local, oci" in str(e.value)
    assert isinstance(make_backend(LocalBackendConfig(root=tmp_path / "sb")), LocalBackend)
    assert isinstance(make_backend(backend_config("oci")), OCIBackend)
    # training configs take it too
    assert RLConfig(backend={"kind": "oci"}).backend == OCIBackendConfig()  # type: ignore[arg-type]
    assert RLConfig().backend == LocalBackendConfig()
    with pytest.raises(ValidationError):
        RLConfig(backend={"kind": "oci", "mode": "copy"})  # type: ignore[arg-type]


def test_unknown_backend_on_the_cli_is_one_line(task: Task, tmp_path: Path) -> None:
    r = cli("judge", "score", "--task", task.path, "--workspace", task.workspace, "--backend", "docker")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode != 0 and len(lines) == 1 and "local, oci" in lines[0], r.stderr


def test_oci_sandbox_runs_the_tasks_layer(task: Task, tmp_path: Path) -> None:
    layer = layer_for(task.spec.environment)
    pins = dict(p.split("==") for p in layer.pins)

    async def go() -> str:
        sb = await OCIBackend(root=tmp_path / "oci").create(spec_for_task(task))
        try:
            r = await sb.exec(PROBE)
            assert r.exit_code == 0, r.stderr
            return r.stdout
        finally:
            await sb.close()

    out = asyncio.run(go())
    prefix, version = out.splitlines()[0].split()
    assert Path(prefix) == layer.path and version == pins["pytest"]
    assert "No module named 'sparring'" in out  # Sparring's own venv is not in the container


def test_environment_over_oci_solves_the_task_and_the_judge_runs_there(task: Task) -> None:
    call = {"name": "write_file", "arguments": json.dumps({"path": "mathx/core.py", "content": FIXED_CLAMP})}
    with Environment.from_task(task.path, backend=OCIBackendConfig()) as env:
        env.reset(seed=0)
        assert isinstance(env.backend, OCIBackend)
        res = env.step({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "bash", "arguments": json.dumps({"command": PROBE})}},
            {"id": "c1", "type": "function", "function": call}]})  # fmt: skip
        probe = res.info["tool_results"][0]["output"]
        assert str(layer_for(task.spec.environment).path) in probe and "No module named 'sparring'" in probe
        res = env.step({"role": "assistant", "content": "", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "submit", "arguments": "{}"}}]})  # fmt: skip
        assert res.terminated and res.reward == 1.0, res.info
        assert isinstance(env.judge.backend, OCIBackend)  # type: ignore[attr-defined]


def test_judge_score_cli_with_backend_oci(task: Task, tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    shutil.copytree(task.workspace, ws)
    (ws / "mathx" / "core.py").write_text(FIXED_CLAMP)
    r = cli("judge", "score", "--task", task.path, "--workspace", ws, "--json", "--backend", "oci")
    d = json.loads(r.stdout)
    assert r.returncode == 0 and d["reward"] == 1.0 and d["tests"]["passed"] == 4, (d, r.stderr[-2000:])
    (ws / "mathx" / "core.py").write_text((task.workspace / "mathx" / "core.py").read_text())
    r = cli("judge", "score", "--task", task.path, "--workspace", ws, "--json", "--backend", "oci")
    assert json.loads(r.stdout)["reward"] == 0.0  # the buggy workspace still fails there


def _with_image(task: Task, dest: Path, image: str) -> Task:
    shutil.copytree(task.path, dest)
    raw = tomllib.loads((dest / "task.toml").read_text())
    raw.setdefault("environment", {})["image"] = image
    (dest / "task.toml").write_text(tomli_w.dumps(raw))
    return load_task(dest)


def test_a_task_naming_an_image_needs_the_oci_backend(task: Task, tmp_path: Path) -> None:
    from sparring.sandbox.oci.image import ensure_image

    image = ensure_image()
    t = _with_image(task, tmp_path / "imaged", image)
    assert t.digest != task.digest and spec_for_task(t).image == image
    assert (
        spec_for_task(task).image is None and load_task(task.path).digest == task.digest
    )  # old digests hold

    async def local() -> None:
        await LocalBackend().create(spec_for_task(t))

    with pytest.raises(SandboxError) as e:
        asyncio.run(local())
    assert "--backend oci" in str(e.value) and "\n" not in str(e.value)

    async def oci(tk: Task) -> str:
        sb = await OCIBackend(root=tmp_path / "oci").create(spec_for_task(tk))
        try:
            r = await sb.exec("cat /workspace/mathx/core.py | head -1; echo ok")
            return r.stdout
        finally:
            await sb.close()

    assert asyncio.run(oci(t)).strip().endswith("ok")  # the task's image runs, with the task's workspace
    missing = _with_image(task, tmp_path / "missing", "localhost/sparring-no-such-image:1")
    with pytest.raises(SandboxError) as e:
        asyncio.run(oci(missing))
    assert "not found locally" in str(e.value) and "\n" not in str(e.value)
