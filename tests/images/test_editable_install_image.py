"""An image whose Python has the task's package installed in editable mode from /testbed (issue 34).

The Debian test image plus a layer holding /testbed/src/pkg (a bug in ``add``) and a ``.pth`` file in
the image's dist-packages pointing at /testbed/src, as ``pip install -e`` leaves it in SWE-style images.
A task pinned to that image with ``[environment] workspace = "/testbed"``: the agent's edit of
/workspace/src/pkg/mod.py is what ``import pkg.mod`` runs from any directory, reset takes it away at
both paths, and the judge's hidden tests (importing the installed package, never /workspace/src) see
the agent's version, so `tasks check` admits the task: reference passes, unfixed fails.

The controls are the behaviour before the fix: the same sandbox without the workspace alias imports the
image's stale copy, and the same task without ``[environment] workspace`` is rejected, its reference
solution failing the hidden tests that run the image's copy."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from image_support import DEBIAN_RECIPE, debian_layout, debian_rootfs_tar, entry, layered_layout, tar_bytes

from sparring.errors import SandboxUnavailableError
from sparring.images.archive import import_archive
from sparring.images.store import ImageStore
from sparring.judge.base import JudgeResult
from sparring.judge.pytest_judge import PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.sandbox.isolation.features import podman_argv
from sparring.sandbox.local.backend import LocalBackend
from sparring.sandbox.oci.backend import OCIBackend
from sparring.tasks.loader import Task, write_task
from sparring.tasks.sandbox_spec import spec_for_task
from sparring.tasks.spec import Environment, JudgeSpec, TaskSpec

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="image roots are bound by the host: overlay mode (root)"),
]
SPARRING = [str(Path(sys.executable).parent / "sparring")]
TAG = "sparring-test/editable-testbed:1"
MOD = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
HIDDEN = """\
import optdep  # a dependency of the tests: it tries an optional module and carries on without it
import pkg.mod


def test_add():
    assert pkg.mod.add(2, 3) == 5


def test_imported_from_the_install():
    assert pkg.mod.__file__ == "/testbed/src/pkg/mod.py"
"""
OPTDEP = "try:\n    import fasthelper\nexcept ImportError:\n    fasthelper = None\n"
PROBE = "cd /tmp && python3 -c 'import pkg.mod; print(pkg.mod.add(2, 3), pkg.mod.__file__)'"


@pytest.fixture(scope="module")
def image(tmp_path_factory) -> tuple[ImageStore, str, Path]:
    d = tmp_path_factory.mktemp("editable-image")
    with tarfile.open(debian_rootfs_tar(DEBIAN_RECIPE)) as tf:  # Debian's own sitecustomize, which a
        own = [n[2:] for n in tf.getnames() if n.endswith("/sitecustomize.py") and n.startswith("./usr/lib/")]
    # conda interpreter (SWE-bench's images) has none of: whited out, so the image's Python looks for one
    # on its whole sys.path, as theirs does
    whiteouts = [entry(f"{os.path.dirname(n)}/.wh.sitecustomize.py", data=b"") for n in own]
    layer = tar_bytes([
        *whiteouts,
        entry("testbed/", tarfile.DIRTYPE), entry("testbed/src/", tarfile.DIRTYPE),
        entry("testbed/src/pkg/", tarfile.DIRTYPE), entry("testbed/src/pkg/__init__.py", data=b""),
        entry("testbed/src/pkg/mod.py", data=MOD.encode()),
        entry("usr/lib/python3/dist-packages/__editable__.pkg-1.0.pth", data=b"/testbed/src\n"),
        entry("usr/lib/python3/dist-packages/optdep.py", data=OPTDEP.encode()),
    ])  # fmt: skip
    layout = layered_layout(debian_layout(DEBIAN_RECIPE), layer, d / "layout")
    store = ImageStore(d / "store")
    rec = import_archive(store, layout, tag=TAG)
    return store, f"{TAG}@{rec.digest}", layout


def _task(root: Path, image: str, workspace: str | None) -> Task:
    spec = TaskSpec(
        id="editable-add", family="code-repair", instruction="The function add in src/pkg/mod.py subtracts its arguments: make it return their sum.",
        success_criteria="The hidden tests pass.", environment=Environment(image=image, workspace=workspace),
        judge=JudgeSpec(hidden_tests=["test_hidden.py::test_add", "test_hidden.py::test_imported_from_the_install"]),
    )  # fmt: skip
    return write_task(
        root, spec, workspace={"src/pkg/__init__.py": "", "src/pkg/mod.py": MOD},
        hidden={"test_hidden.py": HIDDEN}, solution={"src/pkg/mod.py": FIXED},
    )  # fmt: skip


def test_the_agent_edits_what_the_image_installed(image, tmp_path):
    store, ref, _ = image
    task = _task(tmp_path / "task", ref, "/testbed")
    spec = spec_for_task(task)
    assert spec.workspace_alias == "/testbed" and spec.image == ref

    async def go() -> tuple[str, ...]:
        b = LocalBackend(root=tmp_path / "sb", image_store=store)
        try:
            sb = await b.create(spec)
            try:
                await sb.write_file("/workspace/src/pkg/mod.py", FIXED.encode())
                edited = (await sb.exec(PROBE)).stdout
                await sb.reset()
                reset = (
                    await sb.exec(PROBE + "; cat /workspace/src/pkg/mod.py /testbed/src/pkg/mod.py")
                ).stdout
            finally:
                await sb.close()
            control = await b.create(spec.model_copy(update={"workspace_alias": None}))
            try:  # before the fix: the same edit, and the installed package is still the image's copy
                await control.write_file("/workspace/src/pkg/mod.py", FIXED.encode())
                stale = (await control.exec(PROBE)).stdout
            finally:
                await control.close()
            return edited, reset, stale
        finally:
            await b.aclose()

    edited, reset, stale = asyncio.run(go())
    assert edited == "5 /testbed/src/pkg/mod.py\n"  # the agent's edit, through the image's install
    assert reset == "-1 /testbed/src/pkg/mod.py\n" + MOD + MOD  # gone at both paths
    assert stale == "-1 /testbed/src/pkg/mod.py\n"  # the control: without the alias, the stale copy


def test_the_judge_runs_the_agents_version(image, tmp_path):
    store, ref, _ = image
    env = {**os.environ, "SPARRING_IMAGE_ROOT": str(store.root)}
    checked = {}
    for name, workspace in (("aliased", "/testbed"), ("control", None)):
        task = _task(tmp_path / name, ref, workspace)
        r = subprocess.run([*SPARRING, "tasks", "check", str(task.path), "--json", "--repeats", "2"],
                           capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
        assert r.stdout, r.stderr[-2000:]
        checked[name] = (r.returncode, json.loads(r.stdout)["tasks"][0])
    code, aliased = checked["aliased"]
    assert code == 0 and aliased["ok"], aliased  # reference passes, unfixed fails: admitted
    code, control = checked["control"]
    assert code != 0 and not control["ok"], control  # the judge ran the image's stale copy
    assert [p["rule"] for p in control["problems"]] == ["solution_passes"], control
    assert "test_hidden.py::test_add" in control["problems"][0]["detail"], control


def test_the_oci_backend_binds_it_at_the_image_path_too(image, tmp_path):
    """The same image in podman's storage (skopeo copies the layout there), run by the OCI backend."""
    _, _, layout = image
    try:
        backend = OCIBackend(root=tmp_path / "oci")
    except SandboxUnavailableError as e:
        pytest.fail(f"the OCI backend is unavailable here: {e}")
    name = "localhost/sparring-test/editable-testbed:alias"
    r = subprocess.run(["skopeo", "copy", "--quiet", f"oci:{layout}", f"containers-storage:{name}"],
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-1000:]
    spec = spec_for_task(_task(tmp_path / "task", name, "/testbed"))
    probe = PROBE  # python3 on PATH is the image's here too (no host layer is bound: issue 34)

    async def go() -> tuple[str, ...]:
        out = []
        for s in (spec, spec.model_copy(update={"workspace_alias": None})):  # the alias, then the control
            sb = await backend.create(s)
            try:
                await sb.write_file("/workspace/src/pkg/mod.py", FIXED.encode())
                out.append((await sb.exec(probe)).stdout)
                await sb.reset()
                out.append((await sb.exec(probe)).stdout)
            finally:
                await sb.close()
        return tuple(out)

    try:
        edited, reset, stale, _ = asyncio.run(go())
    finally:
        subprocess.run([*podman_argv(), "rmi", "-f", name], capture_output=True, timeout=120)
    assert edited == "5 /testbed/src/pkg/mod.py\n" and reset == "-1 /testbed/src/pkg/mod.py\n"
    assert stale == "-1 /testbed/src/pkg/mod.py\n"  # the control: the image's copy


CRASH_AT_START = "import os\nos._exit(7)\n"


def test_a_sitecustomize_on_the_images_path_runs_before_no_judge(image, tmp_path):
    """The image's ``.pth`` puts /testbed/src on every interpreter's ``sys.path``, and /testbed is the
    candidate's workspace, so a ``sitecustomize.py`` written there runs at the start of any Python in the
    sandbox (the control: the agent's ``python3`` exits 7). The judge's launcher and driver start with
    ``-S`` and run the site set-up behind a guard that refuses the candidate's modules until the judge's
    ``start``: a crash planted for interpreter start is no ``judge_error`` (no score, retried) but a run of
    the candidate's code like any other, scored on its tests."""
    store, ref, _ = image
    task = _task(tmp_path / "task", ref, "/testbed")
    backend = LocalBackend(root=tmp_path / "sb", image_store=store)

    async def go() -> tuple[int, JudgeResult, JudgeResult]:
        try:
            sb = await backend.create(spec_for_task(task))
            try:
                await sb.write_file("/workspace/src/sitecustomize.py", CRASH_AT_START.encode())
                started = (await sb.exec("cd /tmp && python3 -c 'print(1)'")).exit_code
            finally:
                await sb.close()
            judge = PytestJudge(backend)
            unfixed = await judge.score(
                task, WorkspaceDiff(files={"src/sitecustomize.py": CRASH_AT_START.encode()})
            )
            fixed = await judge.score(
                task,
                WorkspaceDiff(
                    files={"src/sitecustomize.py": CRASH_AT_START.encode(), "src/pkg/mod.py": FIXED.encode()}
                ),
            )
            return started, unfixed, fixed
        finally:
            await backend.aclose()

    started, unfixed, fixed = asyncio.run(go())
    assert started == 7  # the control: the planted file runs at every ordinary interpreter's start
    assert unfixed.status == "ok" and unfixed.reward == 0.0, (unfixed.reason, unfixed.log[-2000:])
    assert fixed.status == "ok" and fixed.components["all_pass"] == 1.0, (fixed.reason, fixed.log[-2000:])
    assert (
        "startup_hook" in fixed.flags and fixed.reward == 0.0
    )  # the file itself is the static checks' matter


# Found by the tests' dependency through the image's path of the workspace (/testbed/src is on sys.path):
# it patches the unfixed function the hidden test checks.
FASTHELPER = "import pkg.mod\n\npkg.mod.add = lambda a, b: a + b\n"


def test_a_dependency_never_imports_the_candidates_module_through_the_images_path(image, tmp_path):
    """The judge's import gate covers every path the sandbox shows the workspace at: a module the candidate
    leaves under /testbed/src, which the tests' dependency ``optdep`` tries as an optional import, is refused
    and flagged as it would be from /workspace (without that, it patched the unfixed answer: reward 1.0)."""
    store, ref, _ = image
    task = _task(tmp_path / "task", ref, "/testbed")
    backend = LocalBackend(root=tmp_path / "sb", image_store=store)

    async def go() -> tuple[str, JudgeResult, JudgeResult]:
        try:
            sb = await backend.create(spec_for_task(task))
            try:  # the control: an ordinary interpreter there does import it, and is patched
                await sb.write_file("/workspace/src/fasthelper.py", FASTHELPER.encode())
                patched = (await sb.exec(PROBE.replace("import pkg.mod;", "import optdep, pkg.mod;"))).stdout
            finally:
                await sb.close()
            judge = PytestJudge(backend)
            hack = await judge.score(task, WorkspaceDiff(files={"src/fasthelper.py": FASTHELPER.encode()}))
            honest = await judge.score(task, WorkspaceDiff(files={"src/pkg/mod.py": FIXED.encode()}))
            return patched, hack, honest
        finally:
            await backend.aclose()

    patched, hack, honest = asyncio.run(go())
    assert patched == "5 /testbed/src/pkg/mod.py\n"  # the control: the payload works where nothing gates it
    assert hack.status == "ok" and hack.reward == 0.0 and "import_shadowing" in hack.flags, (
        hack.flags,
        hack.log[-2000:],
    )
    assert honest.status == "ok" and honest.reward == 1.0, (honest.flags, honest.log[-2000:])
