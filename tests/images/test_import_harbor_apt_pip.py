"""A Harbor task whose Dockerfile installs packages in `RUN` steps (issue 34): its base is a Debian image
with apt and pip (mmdebstrap, cached: APT_RECIPE) served by a real registry on loopback, one step
`apt-get install`s `jq` and `python3-pytest` from Debian's mirror, the next `pip install`s `tabulate`
from the package index. `tasks
import --format harbor` builds it by default (buildah present), pins the digest, and `tasks check`
admits it; the hidden tests call `jq` and import `tabulate`, which exist only in the built image, so
the oracle scores 1.0 there and the unchanged workspace 0.

The build's `RUN` steps use the host's network (builder.py). Where the host reaches HTTPS through a
proxy with its own certificate authority (one in /usr/local/share/ca-certificates), the task's
Dockerfile adds that authority to the image the way such sites do, so `pip` trusts it; elsewhere it
adds nothing. A host's `PIP_INDEX_URL` (an http(s) index) is used by the `pip install` step."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from image_support import APT_RECIPE, debian_layout, push, registry

SPARRING = [str(Path(sys.executable).parent / "sparring")]
HOST_CAS = Path("/usr/local/share/ca-certificates")
PEOPLE = [
    {"name": "Zoe", "active": True},
    {"name": "bob", "active": False},
    {"name": "Ada", "active": True},
    {"name": "Mia", "active": True},
]
HIDDEN = """\
import shutil
import subprocess

from tabulate import tabulate  # pip-installed by the Dockerfile


def _active():
    out = subprocess.run(["jq", "-r", ".[] | select(.active) | .name", "/app/people.json"],
                         capture_output=True, text=True, check=True).stdout
    return sorted(out.split())


def test_jq_is_the_apt_package():
    assert shutil.which("jq") == "/usr/bin/jq"


def test_report():
    expected = tabulate([[n] for n in _active()], headers=["name"])
    with open("/app/report.txt") as f:
        assert f.read().strip() == expected.strip()
"""
SOLVE = """#!/bin/bash
set -e
jq -r '.[] | select(.active) | .name' /app/people.json | python3 -c '
import sys
from tabulate import tabulate
print(tabulate([[n] for n in sorted(sys.stdin.read().split())], headers=["name"]))' > /app/report.txt
"""

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="buildah and image roots as root (make system)"),
]


def _dockerfile(base: str) -> str:
    index = os.environ.get("PIP_INDEX_URL", "")
    index_opt = f" --index-url {index}" if index.startswith(("http://", "https://")) else ""
    return f"""FROM {base}
COPY certs/ /usr/local/share/ca-certificates/
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends jq python3-pytest \\
 && update-ca-certificates && rm -rf /var/lib/apt/lists/*
RUN pip install -q --no-cache-dir --break-system-packages{index_opt} tabulate==0.9.0
COPY people.json /app/people.json
WORKDIR /app
"""


def _harbor_task(d: Path, base: str) -> Path:
    env = d / "environment"
    (env / "certs").mkdir(parents=True)
    (env / "certs" / "README").write_text("certificate authorities of the host's HTTPS proxy, if any\n")
    if HOST_CAS.is_dir():
        for crt in HOST_CAS.glob("*.crt"):
            shutil.copyfile(crt, env / "certs" / crt.name)
    (env / "Dockerfile").write_text(_dockerfile(base))
    (env / "people.json").write_text(json.dumps(PEOPLE))
    (d / "task.toml").write_text('[metadata]\ndifficulty = "easy"\n\n[verifier]\ntimeout_sec = 120\n')
    (d / "instruction.md").write_text(
        "Write /app/report.txt: the names of the active people in /app/people.json, sorted, as a "
        "`tabulate` table with the header `name`.\n"
    )
    (d / "solution").mkdir()
    (d / "solution" / "solve.sh").write_text(SOLVE)
    (d / "tests").mkdir()
    (d / "tests" / "test.sh").write_text("#!/bin/bash\npytest /tests/test_outputs.py\n")
    (d / "tests" / "test_outputs.py").write_text(HIDDEN)
    return d


def test_a_dockerfile_with_apt_and_pip_steps_is_built_imported_and_admitted(tmp_path):
    for tool in ("buildah", "docker-registry", "skopeo"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is missing: run `make system`")
    layout = debian_layout(APT_RECIPE)
    env = {**os.environ, "SPARRING_IMAGE_ROOT": str(tmp_path / "images")}
    with registry(tmp_path / "registry") as host:
        base = f"{host}/sparring-test/debian:trixie"
        push(layout, base)
        src = _harbor_task(tmp_path / "report-task", base)
        t0 = time.monotonic()
        r = subprocess.run([*SPARRING, "tasks", "import", str(src), "--format", "harbor",
                            "--out", str(tmp_path / "out"), "--json"],
                           capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
        print(f"build + import: {time.monotonic() - t0:.1f} s")
    assert r.returncode == 0, r.stderr[-3000:]
    (t,) = json.loads(r.stdout)["tasks"]
    task = Path(t["path"])
    toml = (task / "task.toml").read_text()
    assert "@sha256:" in toml and host not in toml  # pinned to the built image, not to the base
    assert (task / "workspace" / "people.json").is_file()
    assert "/workspace/people.json" in (task / "hidden" / "test_outputs.py").read_text()
    t0 = time.monotonic()
    r = subprocess.run([*SPARRING, "tasks", "check", str(task), "--json", "--repeats", "2"],
                       capture_output=True, text=True, env=env, timeout=900)  # fmt: skip
    print(f"tasks check: {time.monotonic() - t0:.1f} s")
    checked = json.loads(r.stdout)["tasks"][0]
    assert r.returncode == 0 and checked["ok"], checked
    ws = tmp_path / "ws"
    shutil.copytree(task / "workspace", ws)
    scores = []
    for solved in (False, True):
        if solved:
            shutil.copyfile(task / "solution" / "report.txt", ws / "report.txt")
        r = subprocess.run([*SPARRING, "judge", "score", "--task", str(task), "--workspace", str(ws), "--json"],
                           capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
        assert r.returncode == 0, r.stderr[-2000:]
        scores.append(json.loads(r.stdout))
    unsolved, solved_score = scores
    assert unsolved["reward"] == 0.0, unsolved
    assert solved_score["reward"] == 1.0 and solved_score["tests"]["passed"] == 2, solved_score
    assert "Ada" in (task / "solution" / "report.txt").read_text()
