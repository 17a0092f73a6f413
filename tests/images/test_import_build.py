"""`tasks import --format harbor --build`: the task's Dockerfile is built with buildah (a RUN step the
mapper refuses really runs), the task is pinned to the built image's digest, its workspace is what the
build left in the work directory, and the solution script runs in that image (its `bash` exists only
there). Scratch image with the host's static busybox: no registry needed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

BUSYBOX = shutil.which("busybox")
SPARRING = [str(Path(sys.executable).parent / "sparring")]
SETUP = (
    "/bin/busybox --install -s /bin && printf '#!/bin/sh\\nexec sh \"$@\"\\n' > /bin/bash && chmod 755 /bin/bash"
    " && mkdir -p /app /etc && echo 41 > /app/answer.txt && touch /etc/sparring-built"
)
DOCKERFILE = f"""FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "sh", "-c", {json.dumps(SETUP)}]
COPY notes.txt /app/notes.txt
WORKDIR /app
"""

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or BUSYBOX is None, reason="buildah as root, busybox-static (make system)"
)


def _harbor_task(d: Path) -> Path:
    env = d / "environment"
    env.mkdir(parents=True)
    assert BUSYBOX is not None
    shutil.copy(BUSYBOX, env / "busybox")
    (env / "Dockerfile").write_text(DOCKERFILE)
    (env / "notes.txt").write_text("copied by the Dockerfile\n")
    (d / "task.toml").write_text('[metadata]\ndifficulty = "easy"\n\n[verifier]\ntimeout_sec = 60\n')
    (d / "instruction.md").write_text(
        "The file /app/answer.txt holds the wrong number. Write 42 in it instead.\n"
    )
    (d / "solution").mkdir()
    (d / "solution" / "solve.sh").write_text(
        "#!/bin/bash\nset -e\ntest -f /etc/sparring-built\necho 42 > /app/answer.txt\n"
    )
    (d / "tests").mkdir()
    (d / "tests" / "test_outputs.py").write_text(
        "def test_answer():\n    assert open('/app/answer.txt').read().strip() == '42'\n"
    )
    return d


def test_import_builds_the_dockerfile_and_pins_the_image(tmp_path):
    if shutil.which("buildah") is None:
        pytest.fail("buildah is missing: run `make system` (apt-get install buildah)")
    src = _harbor_task(tmp_path / "answer-task")
    env = {**os.environ, "SPARRING_IMAGE_ROOT": str(tmp_path / "images")}
    # Control: the mapper refuses this Dockerfile (a binary outside the work directory, a RUN), so only a
    # real build can import this task.
    r = subprocess.run([*SPARRING, "tasks", "import", str(src), "--format", "harbor", "--no-build", "--out", str(tmp_path / "mapped")],
                       capture_output=True, text=True, env=env, timeout=300)  # fmt: skip
    assert r.returncode != 0 and "is not supported" in r.stderr, r.stderr
    r = subprocess.run([*SPARRING, "tasks", "import", str(src), "--format", "harbor", "--build",
                        "--out", str(tmp_path / "out"), "--json"],
                       capture_output=True, text=True, env=env, timeout=600)  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    (t,) = json.loads(r.stdout)["tasks"]
    task = Path(t["path"])
    image = tomllib.loads((task / "task.toml").read_text())["environment"]["image"]
    assert (
        image.startswith("sparring-import/") and "@sha256:" in image and len(image.split("@sha256:")[1]) == 64
    )
    r = subprocess.run([*SPARRING, "image", "list", "--json"], capture_output=True, text=True, env=env)
    assert image.split("@")[1] in r.stdout  # the pinned digest is the built image in the store
    assert (task / "workspace" / "answer.txt").read_text() == "41\n"  # written by the RUN step
    assert (task / "workspace" / "notes.txt").read_text() == "copied by the Dockerfile\n"
    assert (task / "solution" / "answer.txt").read_text() == "42\n"  # the script ran in the image
    assert "/workspace/answer.txt" in (task / "hidden" / "test_outputs.py").read_text()
