"""`tasks import --format terminal-bench` (and `harbor`) on task directories written here, one per layout:
each imports, is admitted, its reference scores 1 and doing nothing 0; what cannot map onto the host is
refused with one line naming the directive, and nothing is written."""

from __future__ import annotations

import asyncio
import importlib.metadata as md
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sparring.judge.pytest_judge import JudgeConfig, PytestJudge
from sparring.sandbox.base import WorkspaceDiff
from sparring.tasks.importers import import_tasks
from sparring.tasks.importers.batch import RecordErrors
from sparring.tasks.loader import SOLUTION_CALLS, Task, solution_diff
from tests_support import oracle_rollout

SPARRING = Path(sys.executable).parent / "sparring"
YAML_PIN = f"pyyaml=={md.version('pyyaml')}"

TB_DOCKERFILE = f"""# terminal-bench style
FROM ghcr.io/laude-institute/t-bench/python-3-13:20250620

WORKDIR /app
RUN apt-get update && apt-get install -y --no-install-recommends \\
    bash coreutils && rm -rf /var/lib/apt/lists/*
RUN pip install --no-cache-dir {YAML_PIN}
COPY data.txt /app/data.txt
COPY . /app/
CMD ["bash"]
"""
TB_COMPOSE = """services:
  client:
    build:
      dockerfile: Dockerfile
    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}
    container_name: ${T_BENCH_TASK_DOCKER_CLIENT_CONTAINER_NAME}
    command: [ "sh", "-c", "sleep infinity" ]
"""
TB_TESTS = """import subprocess
from pathlib import Path


def test_greeting_file():
    assert Path("/app/greeting.txt").read_text() == "Hello, sparring!\\n"


def test_count_script_counts_lines():
    r = subprocess.run(["bash", "/app/count.sh"], capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == "3"
"""
TB_SOLUTION = """#!/bin/bash
set -euo pipefail
echo "Hello, sparring!" > /app/greeting.txt
printf '#!/bin/bash\\nwc -l < /app/data.txt\\n' > /app/count.sh
"""

HB_TESTS = """from pathlib import Path


class TestSum:
    def test_sum_file_exists(self):
        assert Path("/app/out/sum.txt").is_file()

    def test_sum_is_right(self):
        assert Path("/app/out/sum.txt").read_text().strip() == "60"
"""


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def tb_task(root: Path, **over: str) -> Path:
    files = {
        "task.yaml": "instruction: |\n  Create /app/greeting.txt holding exactly the line 'Hello, sparring!' and a "
        "script /app/count.sh that prints how many lines /app/data.txt has.\ndifficulty: easy\n"
        "max_agent_timeout_sec: 300\nmax_test_timeout_sec: 60\ntags: [file-operations]\n",
        "Dockerfile": TB_DOCKERFILE, "docker-compose.yaml": TB_COMPOSE, "data.txt": "a\nb\nc\n",
        "notes.md": "scratch notes the Dockerfile copies with the context\n",
        "run-tests.sh": "#!/bin/bash\npip install pytest\npytest $TEST_DIR/test_outputs.py -rA\n",
        "solution.sh": TB_SOLUTION, "tests/test_outputs.py": TB_TESTS,
    }  # fmt: skip
    return _write(root, {**files, **over})


def hb_task(root: Path, **over: str) -> Path:
    files = {
        "instruction.md": "# Sum\n\nRead /app/numbers.txt (one integer per line) and write their sum, a single "
        "number, to /app/out/sum.txt.\n",
        "task.toml": 'version = "1.0"\n\n[metadata]\ndifficulty = "medium"\ntags = ["math"]\n\n[verifier]\n'
        'timeout_sec = 90.0\n\n[agent]\ntimeout_sec = 240.0\n\n[environment]\ncpus = 1\nmemory_mb = 1024\n',
        "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\nRUN mkdir -p /app/out\nCOPY numbers.txt ./\n",
        "environment/numbers.txt": "10\n20\n30\n",
        "solution/solve.sh": "#!/bin/bash\nmkdir -p /app/out\nawk '{s+=$1} END {print s}' /app/numbers.txt > /app/out/sum.txt\n",
        "tests/test.sh": "#!/bin/bash\ncd /tests\nuv pip install pytest\npytest test_outputs.py\n",
        "tests/test_outputs.py": HB_TESTS,
    }  # fmt: skip
    return _write(root, {**files, **over})


@pytest.fixture(scope="module")
def imported(backend, tmp_path_factory) -> dict[str, Task]:
    src = tmp_path_factory.mktemp("tb-src")
    tb_task(src / "hello-file")
    tasks = import_tasks("terminal-bench", src / "hello-file", src / "out", backend=backend)
    hb_task(src / "harbor" / "sum-numbers")
    tasks += import_tasks("harbor", src / "harbor", src / "out", backend=backend)
    return {t.id: t for t in tasks}


@pytest.fixture(scope="module")
def judge(backend) -> PytestJudge:
    return PytestJudge(backend, config=JudgeConfig(shuffle_seed=1))


def test_both_layouts_map_prompt_tests_solution_tier_and_budgets(imported) -> None:
    tb, hb = imported["terminal-hello-file"], imported["terminal-sum-numbers"]
    assert "/workspace/greeting.txt" in tb.spec.instruction and "/app" not in tb.spec.instruction
    assert tb.spec.difficulty == 1 and tb.spec.limits.wall_s == 300 and tb.spec.judge.timeout_s == 60
    assert hb.spec.difficulty == 2 and hb.spec.limits.wall_s == 240 and hb.spec.judge.timeout_s == 90
    assert hb.spec.limits.memory_mb == 1024
    assert YAML_PIN in tb.spec.environment.requirements
    assert tb.spec.judge.hidden_tests == ["test_outputs.py::test_greeting_file",
                                          "test_outputs.py::test_count_script_counts_lines"]  # fmt: skip
    assert hb.spec.judge.hidden_tests == ["test_outputs.py::TestSum::test_sum_file_exists",
                                          "test_outputs.py::TestSum::test_sum_is_right"]  # fmt: skip
    # The workspace is what the Dockerfile copies, never the tests, the solution or the task's metadata.
    assert sorted(p.relative_to(tb.workspace).as_posix() for p in tb.workspace.rglob("*")) == [
        "data.txt",
        "notes.md",
    ]
    assert sorted(p.relative_to(hb.workspace).as_posix() for p in hb.workspace.rglob("*")) == ["numbers.txt"]
    assert (tb.solution / "greeting.txt").read_text() == "Hello, sparring!\n"
    assert (hb.solution / "out" / "sum.txt").read_text() == "60\n"
    calls = json.loads((tb.solution / SOLUTION_CALLS).read_text())
    assert calls[0]["name"] == "bash" and "/workspace/greeting.txt" in calls[0]["arguments"]["command"]
    assert "/workspace/greeting.txt" in (tb.hidden / "test_outputs.py").read_text()


def test_reference_scores_one_and_doing_nothing_zero(imported, judge) -> None:
    for t in imported.values():
        ref = asyncio.run(judge.score(t, solution_diff(t)))
        assert ref.reward == 1.0 and not ref.flags, (t.id, ref.per_test, ref.log[-600:])
        nothing = asyncio.run(judge.score(t, WorkspaceDiff()))
        assert nothing.reward == 0.0 and not any(v == "passed" for v in nothing.per_test.values()), t.id


@pytest.mark.slow
def test_imported_tasks_are_admitted(imported) -> None:
    dirs = [str(t.path) for t in imported.values()]
    r = subprocess.run([str(SPARRING), "tasks", "check", *dirs, "--json", "--repeats", "2", "--no-store"],
                       capture_output=True, text=True, timeout=900, env=os.environ.copy())  # fmt: skip
    data = json.loads(r.stdout)
    assert r.returncode == 0, [t["problems"] for t in data["tasks"]]
    assert len(data["tasks"]) == 2


def test_what_cannot_map_is_one_line_naming_it_and_nothing_is_written(backend, tmp_path) -> None:
    src = tmp_path / "src"
    tb_task(src / "a-good")
    tb_task(src / "b-env", Dockerfile="FROM python:3.11\nWORKDIR /app\nENV MODE=fast\n")
    tb_task(src / "c-apt", Dockerfile="FROM ubuntu\nRUN apt-get install -y sparring-no-such-package-xyz\n")
    tb_task(
        src / "d-curl",
        Dockerfile="FROM ubuntu\nWORKDIR /app\nRUN curl -sSL https://example.com/x.sh -o x.sh\n",
    )
    tb_task(src / "e-pip", Dockerfile="FROM python:3.11\nRUN pip install numpy\n")
    tb_task(src / "f-compose", **{"docker-compose.yaml": TB_COMPOSE + "  db:\n    image: postgres:16\n"})
    hb_task(
        src / "g-copy-out",
        **{"environment/Dockerfile": "FROM ubuntu\nWORKDIR /app\nCOPY numbers.txt /etc/\n"},
    )
    out = tmp_path / "out"
    with pytest.raises(RecordErrors) as e:
        import_tasks("terminal-bench", src, out, backend=backend)
    p = e.value.problems
    assert len(p) == 6 and all("\n" not in x for x in p), p
    assert p[0].startswith("b-env: Dockerfile line 3: ENV is not supported")
    assert (
        "c-apt: Dockerfile line 2: apt package sparring-no-such-package-xyz is not installed on this host"
        in p[1]
    )
    assert p[2].startswith("d-curl: Dockerfile line 3: RUN curl")
    assert "pip package 'numpy' is not pinned" in p[3]
    assert "f-compose: docker-compose.yaml: service 'db' is not supported" in p[4]
    assert "g-copy-out: Dockerfile line 3: COPY to /etc/, outside the work directory /app" in p[5]
    assert "6 of 7 task directories rejected, nothing written" in str(e.value)
    assert not out.exists()
    # --no-build: the mapper's refusals (the default builds with buildah where it is installed; these
    # bases, from Docker Hub and ghcr.io, need not be reachable)
    r = subprocess.run([str(SPARRING), "tasks", "import", "--format", "harbor", "--no-build", str(src), "--out", str(out)],
                       capture_output=True, text=True, timeout=300, env=os.environ.copy())  # fmt: skip
    assert r.returncode != 0 and "ENV is not supported" in r.stderr and not out.exists()


@pytest.mark.slow
def test_the_oracle_policy_scores_one_in_a_rollout(imported, tmp_path) -> None:
    """The oracle as training runs it: through the task's tools in the agent's sandbox, then the judge."""
    data = oracle_rollout(next(iter(imported.values())).path.parent, tmp_path / "s.db")
    assert data["statuses"] == {"ok": len(imported)} and data["reward_mean"] == 1.0, data


def test_without_buildah_the_import_maps_and_says_so_in_one_line(tmp_path) -> None:
    """The default builds where buildah is installed; on a PATH without it the mapper runs, with a note."""
    bin_dir = tmp_path / "bin"  # the host's PATH, every program but buildah
    bin_dir.mkdir()
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or not Path(d).is_dir():
            continue
        for exe in Path(d).iterdir():
            if exe.name != "buildah" and not (bin_dir / exe.name).exists():
                (bin_dir / exe.name).symlink_to(exe)
    src = hb_task(tmp_path / "harbor")
    out = tmp_path / "out"
    r = subprocess.run([str(SPARRING), "tasks", "import", "--format", "harbor", str(src), "--out", str(out), "--json"],
                       capture_output=True, text=True, timeout=300, env={**os.environ, "PATH": str(bin_dir)})  # fmt: skip
    assert r.returncode == 0, r.stderr[-2000:]
    notes = [line for line in r.stderr.splitlines() if "buildah" in line]
    assert len(notes) == 1 and "buildah is not installed" in notes[0] and "mapped" in notes[0], r.stderr
    (t,) = json.loads(r.stdout)["tasks"]
    assert "image" not in (Path(t["path"]) / "task.toml").read_text()  # the mapper: a Python layer, no image
