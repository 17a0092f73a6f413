"""Exporters and `sparring report` on a real metrics log."""

from __future__ import annotations

import json
import re
import struct
import subprocess
import sys
from pathlib import Path

from sparring.monitor.metrics import iteration_metrics, make_sinks, with_aliases
from sparring.train.sampling import zero_variance_groups
from sparring.trajectory import TokenTrace, Trajectory

EXE = Path(sys.executable).parent / "sparring"


def _traj(task, reward, status="ok", tier=1, group="g", flags=()):
    return Trajectory(task_id=task, task_digest="d", policy="p", status=status, reward=reward, family="fam",
                      difficulty=tier, group_id=group, components={"all_pass": reward}, flags=list(flags))  # fmt: skip


def test_iteration_metrics_per_family_tier_and_status():
    trajs = [_traj("a", 1.0, tier=1), _traj("a", 0.0, tier=1), _traj("b", 1.0, tier=2, flags=["test_tampering"]),
             _traj("c", 0.0, status="infra_error", tier=2)]  # fmt: skip
    m = iteration_metrics(trajs, 2.0, policy_version=3)
    assert m["rollout/pass_rate/tier1"] == 0.5 and m["rollout/pass_rate/tier2"] == 0.5
    assert m["rollout/component/all_pass/fam"] == 0.5
    assert m["rollout/status_frac/infra_error"] == 0.25 and m["rollout/flag_frac/test_tampering"] == 0.25
    assert m["rollout/staleness_max"] == 3.0 and m["rollout/throughput_per_min"] == 120.0


def test_zero_variance_groups_include_groups_without_two_trainable_samples():
    trajs = [_traj("a", 1.0, group="ga"), _traj("a", 1.0, group="ga"), _traj("b", 1.0, group="gb"),
             _traj("b", 0.0, group="gb"), _traj("c", 1.0, group="gc"), _traj("c", 0.0, "infra_error", group="gc")]  # fmt: skip
    assert zero_variance_groups(trajs) == ["a", "c"]


def _tf_records(path: Path) -> int:
    data, n, pos = path.read_bytes(), 0, 0
    while pos < len(data):
        (length,) = struct.unpack("<Q", data[pos : pos + 8])
        pos += 8 + 4 + length + 4
        n += 1
    return n


def test_tensorboard_and_jsonl_sinks_write_every_iteration(tmp_path):
    sink = make_sinks(["tensorboard"], tmp_path, "run-x", {})
    for step in range(3):
        sink.log(
            step,
            {"rollout/pass_rate": step / 3, "rollout/statuses": {"ok": 4}, "rollout/rewards": [0.0, 1.0]},
        )
    sink.close()
    lines = (tmp_path / "metrics" / "run-x.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1, 2]
    events = list((tmp_path / "tensorboard" / "run-x").glob("events.out.tfevents.*"))
    assert len(events) == 1 and _tf_records(events[0]) >= 1 + 3 * 2  # header + 2 scalars per step


def test_report_draws_curves_tiers_and_histograms(tmp_path):
    metrics = tmp_path / "metrics" / "run-y.jsonl"
    metrics.parent.mkdir()
    rows = [{"step": i, "rollout/reward_mean": 0.2 + 0.1 * i, "rollout/pass_rate": 0.2 + 0.1 * i,
             "rollout/pass_rate/tier1": 0.3 + 0.1 * i, "rollout/pass_rate/tier2": 0.1 * i,
             "rollout/rewards": [0.0, 1.0, 1.0], "monitor/alerts": 0} for i in range(4)]  # fmt: skip
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = subprocess.run(
        [str(EXE), "report", str(tmp_path), "--json"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    html = Path(j["html"]).read_text()
    # every chart is a figure; the logged ones inline their SVG (the others say they were not logged)
    assert html.count("<figure class='chart'") == len(j["charts"]) and "reward_pass" in j["charts"]
    assert html.count("<svg") == 2 * (len(j["charts"]) - len(j["empty_charts"]))  # wide + phone versions
    assert "pass_rate_tier" not in j["empty_charts"] and "tier1" in html and "tier2" in html
    assert j["pass_rate_first"] == 0.2 and abs(j["pass_rate_last"] - 0.5) < 1e-9
    bad = subprocess.run(
        [str(EXE), "report", str(tmp_path / "nope")], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2 and "run not found" in bad.stderr


def test_trl_and_verl_names_reach_tensorboard_and_jsonl(tmp_path):
    """Response lengths, entropy, reward std, learning rate and time per stage, under our names and
    under the slash names TRL and verl users look for."""
    trajs = [_traj("a", 1.0), _traj("a", 0.0)]
    for t, n in zip(trajs, (4, 8), strict=True):
        t.traces = [TokenTrace(prompt_ids=[1], completion_ids=list(range(n)), logprobs=[-0.5] * n)]
        t.timings = {"policy_ms": 1000.0, "tool_ms": 500.0, "judge_ms": 250.0}
    m = iteration_metrics(trajs, 2.0, max_new_tokens=8)
    assert m["response_length/mean"] == 6.0 and m["response_length/max"] == 8.0
    assert m["response_length/clip_ratio"] == 0.5 and abs(m["actor/entropy"] - 0.5) < 1e-9
    assert m["rollout/reward_std"] == 0.5
    assert m["timing_s/policy"] == 2.0 and m["timing_s/tools"] == 1.0 and m["timing_s/judge"] == 0.5
    m.update({"train/loss": 0.25, "actor/lr": 1e-3, "timing_s/update": 0.1})
    full = with_aliases(m)
    for name in ("entropy", "reward_std", "completions/mean_length", "completions/clipped_ratio", "loss",
                 "learning_rate", "actor/pg_loss", "critic/score/mean", "timing_s/update_actor"):  # fmt: skip
        assert name in full, name
    sink = make_sinks(["tensorboard"], tmp_path, "run-p", {})
    sink.log(0, full)
    sink.close()
    row = json.loads((tmp_path / "metrics" / "run-p.jsonl").read_text())
    assert row["entropy"] == row["actor/entropy"] and row["learning_rate"] == 1e-3
    events = next((tmp_path / "tensorboard" / "run-p").glob("events.out.tfevents.*")).read_bytes()
    for tag in (b"actor/entropy", b"completions/mean_length", b"learning_rate", b"timing_s/judge"):
        assert tag in events, tag


def test_report_of_a_killed_one_iteration_run_without_an_update(tmp_path):
    """What a kill leaves: a torn last metrics line and an unreadable store. The report still draws
    what the log holds; the update charts are gaps (no update ran), and one iteration is one tick."""
    metrics = tmp_path / "metrics" / "run-k.jsonl"
    metrics.parent.mkdir()
    row = {"step": 0, "rollout/reward_mean": 0.0, "rollout/pass_rate": 0.0, "rollout/rewards": [0.0, 0.0],
           "train/loss": 0.0, "train/grad_norm": 0.0, "train/clip_frac": 0.0, "train/kl": 0.0, "train/skipped": 1.0}  # fmt: skip
    metrics.write_text(json.dumps(row) + "\n" + json.dumps({**row, "step": 1})[:40])
    (tmp_path / "store.db").write_bytes(b"not a database" * 100)
    r = subprocess.run(
        [str(EXE), "report", str(tmp_path), "--json"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert "torn last line" in r.stderr and "metrics only" in r.stderr
    j = json.loads(r.stdout)
    assert j["iterations"] == 1
    assert {"loss", "grad_norm", "clip_frac", "kl"} <= set(j["empty_charts"])  # a gap, never a 0
    html = Path(j["html"]).read_text()
    assert "no GRPO update ran" in html
    svg = Path(j["html"]).parent.joinpath("assets", "reward_pass.svg").read_text()
    xticks = svg.split('id="matplotlib.axis_1"')[1].split('id="matplotlib.axis_2"')[0]
    labels = re.findall(r'<g id="xtick_\d+">.*?<text[^>]*>([^<]*)</text>', xticks, re.S)
    assert labels[:1] == ["0"] and all("." not in x for x in labels), labels
