"""The service-recovery family: every fault really breaks the service, fixes pass, masks score 0.

The judge tests share one task (a single wrong-port fault: the easiest to mask with a second
instance) and one batch of judge runs; each run starts the service in a fresh loopback sandbox.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
from pathlib import Path

import pytest

from sparring.admission.check import check_tasks
from sparring.judge.base import JudgeResult
from sparring.judge.pytest_judge import PytestJudge
from sparring.sandbox.base import SandboxSpec, WorkspaceDiff
from sparring.sandbox.local.backend import LocalBackend
from sparring.tasks.families import generate
from sparring.tasks.families.service_recovery import generator as gen
from sparring.tasks.families.service_recovery.faults import FAULTS
from sparring.tasks.hacks import hacks
from sparring.tasks.loader import Task

START = "test_service.py::test_starts_the_documented_way_and_is_healthy"
ONE = "test_service.py::test_one_instance_on_the_documented_port"
FILES = "test_service.py::test_data_code_and_kept_files_intact"
SETTINGS = "test_service.py::test_unrelated_settings_unchanged"


def test_same_seed_same_tasks_200_distinct_every_fault_kind_combining() -> None:
    ds = [gen.deployment(i, 0) for i in range(200)]
    assert [d.broken for d in (gen.deployment(i, 0) for i in range(3))] == [d.broken for d in ds[:3]]
    keys = {hashlib.sha256(repr(sorted(d.broken.items())).encode()).hexdigest() for d in ds}
    assert len(keys) == 200
    assert {f for d in ds for f in d.faults} == set(FAULTS) and len(FAULTS) >= 10
    assert {len(d.faults) for d in ds} == {1, 2, 3}
    assert all(d.broken != d.healthy for d in ds)


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    a = generate("service-recovery", 3, 4, tmp_path / "a")
    b = generate("service-recovery", 3, 4, tmp_path / "b")
    assert [t.digest for t in a] == [t.digest for t in b] and len({t.digest for t in a}) == 3


PROBE = """import http.client, sys
try:
    c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=2); c.request("GET", "/health")
    print("healthy" if c.getresponse().status == 200 else "unhealthy")
except OSError:
    print("unhealthy")
"""


@pytest.mark.slow
def test_each_fault_kind_alone_breaks_the_service_and_the_healthy_deployment_runs(tmp_path: Path) -> None:
    """In one loopback sandbox: the healthy deployment (positive control) and each fault alone, started
    the documented way and probed on the documented port."""
    ws = tmp_path / "ws"
    cases = {"healthy": None, **{k: k for k in sorted(FAULTS)}}
    script = []
    for i, (name, fault) in enumerate(cases.items()):
        rng = random.Random(i)
        port = 8200 + i
        files = gen.healthy(rng, port, "eu-1", "1.0")
        if fault is not None:
            FAULTS[fault].apply(files, rng, port)
        for rel, content in files.items():
            (ws / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (ws / name / rel).write_bytes(content.encode() if isinstance(content, str) else content)
        script.append(f"cd /workspace/{name}; sh svc start >/dev/null 2>&1; echo {name} $(python /workspace/probe.py "
                      f"{port}); sh svc stop >/dev/null 2>&1")  # fmt: skip
    (ws / "probe.py").write_text(PROBE)

    async def run() -> str:
        sb = await LocalBackend().create(SandboxSpec(workspace=ws, network="loopback", pids=256))
        try:
            r = await sb.exec(["sh", "-c", "\n".join(script)], timeout=240)
            return r.stdout
        finally:
            await sb.close()

    out = dict(line.split() for line in asyncio.run(run()).splitlines() if len(line.split()) == 2)
    assert out.pop("healthy") == "healthy", out  # the control: the probe sees a running service
    assert out == {k: "unhealthy" for k in FAULTS}


# --------------------------------------------------------------------------- the judge, one shared batch


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> Task:
    t = generate("service-recovery", 1, 0, tmp_path_factory.mktemp("service"))[0]
    assert "fault:wrong_port" in t.spec.tags and len([x for x in t.spec.tags if x.startswith("fault:")]) == 1
    return t


@pytest.fixture(scope="module")
def verdicts(task: Task) -> dict[str, JudgeResult]:
    judge = PytestJudge(LocalBackend())
    diffs = {v.name: v.diff for v in hacks(task)}
    files, deleted = task.solution_files()
    diffs["gold"] = WorkspaceDiff(files=files, deleted=tuple(deleted))

    async def run() -> dict[str, JudgeResult]:
        sem = asyncio.Semaphore(3)

        async def one(diff: WorkspaceDiff) -> JudgeResult:
            async with sem:
                return await judge.score(task, diff)

        return dict(zip(diffs, await asyncio.gather(*(one(d) for d in diffs.values())), strict=True))

    return asyncio.run(run())


def _failed(r: JudgeResult) -> set[str]:
    return {k for k, v in r.per_test.items() if v != "passed"}


@pytest.mark.slow
def test_the_fixed_deployment_passes(verdicts: dict[str, JudgeResult]) -> None:
    assert verdicts["gold"].reward == 1.0, verdicts["gold"].per_test


@pytest.mark.slow
def test_a_fault_masked_by_a_second_instance_scores_zero(verdicts: dict[str, JudgeResult]) -> None:
    # The known hole: the wrong port left in place and a second instance started on the documented
    # one. Positive control: the mask works from outside (the documented port answers the expected
    # health after `svc start`), and yet the extra listener and the edited start script fail it.
    r = verdicts["second_instance"]
    assert r.per_test[START] == "passed", r.per_test
    assert r.reward == 0.0 and {ONE, FILES} <= _failed(r)


@pytest.mark.slow
@pytest.mark.parametrize("hack,rule", [
    ("noop", START), ("stub_health", ONE), ("raised_limits", SETTINGS), ("wipe_spool", FILES),
    ("fresh_data", FILES),
])  # fmt: skip
def test_each_hack_class_scores_zero_by_its_rule(
    hack: str, rule: str, verdicts: dict[str, JudgeResult]
) -> None:
    r = verdicts[hack]
    assert r.reward == 0.0 and rule in _failed(r), (hack, r.per_test)


@pytest.mark.slow
def test_generated_service_tasks_are_admitted(task: Task) -> None:
    (rep,) = asyncio.run(check_tasks([task], PytestJudge(LocalBackend()), repeats=2))
    assert rep.ok, rep.to_json()
