"""`sparring report` and `sparring traj view` on a real short run, opened in headless Chromium.

The session's quick demo (tiny model, real sandboxes, real judge, real store) is copied for the module; its
report and a stored multi-turn rollout's page are opened as a person would open them: every
chart is there with data, the reward and pass-rate curves are told apart, nothing is fetched
from the network, the console stays silent, and screenshots land under the run dir. The
hostile-content test shows a `<script>` the candidate wrote into a tool output never runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from demo_support import DemoRun, copy_run
from headless import visit
from sparring.store.sqlite import SQLiteStore
from sparring.trajectory import ToolStep, Trajectory

EXE = Path(sys.executable).parent / "sparring"
SIZES = {"desktop": (1400, 3000), "phone": (390, 3000)}


def _cli(*args: str, timeout: int = 600) -> dict:
    r = subprocess.run([str(EXE), *args, "--json"], capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return {**json.loads(r.stdout), "_stderr": r.stderr}


@pytest.fixture(scope="module")
def short_run(demo_quick: DemoRun, tmp_path_factory) -> Path:
    """A copy of the session's quick demo (the README's `sparring demo --quick`, tests/demo_support.py),
    with its stderr beside it; the tests here write reports, pages and screenshots into the copy."""
    work = copy_run(demo_quick, tmp_path_factory.mktemp("short-run") / "run")
    (work / "demo-stderr.log").write_text(demo_quick.stderr)
    return work


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first one may run the session's quick demo under a loaded CI
def test_the_run_logs_progress_as_whole_lines(short_run):
    """stderr is a file here: every long stage logs plain start/end lines with counts, and each
    iteration is one line (its statuses are not split over lines at 80 columns)."""
    log = (short_run / "demo-stderr.log").read_text().splitlines()
    for pattern in (r"warm start: teacher rollouts: (\d+)/\1 done", r"warm start: SFT steps: (\d+)/\1 done",
                    r"held-out evaluation before RL: (\d+)/\1 done", r"iteration 0 rollouts: ",
                    r"RL iterations: 3/3 done", r"held-out evaluation after RL: (\d+)/\1 done"):  # fmt: skip
        assert any(re.match(pattern, ln) for ln in log), pattern
    its = [ln for ln in log if ln.startswith("iteration ") and "statuses" in ln]
    assert len(its) == 3 and all(re.search(r"statuses( \w+:\d+)+$", ln) for ln in its), its


def _figures(dom: str) -> dict[str, str]:
    """chart name -> the figure's serialized markup, from Chromium's DOM dump."""
    out = {}
    for part in dom.split("<figure")[1:]:
        m = re.search(r'data-chart="([^"]+)"', part)
        if m:
            out[m.group(1)] = part.split("</figure>")[0]
    return out


def _series_style(fig: str, gid: str) -> tuple[str, str, int]:
    """(stroke colour, dash pattern, path vertices) of the line drawn with gid ``series-...``."""
    m = re.search(rf'<g id="{gid}"[^>]*>\s*<path d="([^"]*)"[^>]*style="([^"]*)"', fig)
    assert m, f"{gid} not drawn"
    style = dict(kv.split(":", 1) for kv in m.group(2).replace(" ", "").split(";") if ":" in kv)
    vertices = len(re.findall(r"[ML]", m.group(1)))
    return style.get("stroke", ""), style.get("stroke-dasharray", ""), vertices


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first one may run the session's quick demo under a loaded CI
def test_report_of_a_real_run_opens_offline_with_every_chart(short_run):
    j = _cli("report", str(short_run), "--out", str(short_run / "report"))
    assert Path(j["html"]).name == "index.html" and j["iterations"] == 3
    assert set(j["charts"]) >= {"reward_pass", "heldout", "loss", "kl", "entropy", "grad_norm", "clip_frac",
                                "learning_rate", "response_length", "statuses", "throughput", "stage_time",
                                "pass_rate_tier", "pass_rate_family", "reward_histograms", "curriculum",
                                "drift_alerts"}  # fmt: skip
    assert j["empty_charts"] == [] and len(j["png"]) == len(j["charts"])
    shots = {short_run / "screenshots" / f"report-{k}.png": v for k, v in SIZES.items()}
    v = visit(Path(j["html"]), shots)
    assert v.requests == 0, "the report fetched something from the network"
    assert v.console == [], v.console
    figs = _figures(v.dom)
    assert set(figs) == set(j["charts"])
    for name, fig in figs.items():
        points = int(re.search(r'data-points="(\d+)"', fig).group(1))
        assert points > 0 and "<svg" in fig, f"chart {name} is empty"
    # reward and pass rate: both drawn over every iteration, in different colours and dash patterns
    pr = _series_style(figs["reward_pass"], "series-pass_rate")
    rw = _series_style(figs["reward_pass"], "series-reward_mean")
    assert pr[2] == rw[2] == 3
    assert pr[0] != rw[0] and pr[1] != rw[1]
    # axes carry ticks and units; the trajectory pages are linked
    assert "pass rate / reward (0-1)" in figs["reward_pass"] and "iteration" in figs["loss"]
    assert 'href="trajectories/index.html"' in v.dom
    assert all(p.stat().st_size > 5000 for p in shots)


def _multi_turn(store: Path) -> Trajectory:
    s = SQLiteStore(store, readonly=True)
    try:
        from sparring.store.base import TrajQuery

        trajs = s.search(TrajQuery(limit=None))[1]
    finally:
        s.close()
    best = [t for t in trajs if len(t.steps) >= 2 and t.diff.get("files") and t.tests.passed + t.tests.failed]
    assert best, "the run stored no multi-turn rollout with a diff"
    return best[0]


@pytest.mark.slow
@pytest.mark.timeout(1500)  # the first one may run the session's quick demo under a loaded CI
def test_trajectory_page_of_a_stored_multi_turn_rollout(short_run):
    store = short_run / "store.db"
    t = _multi_turn(store)
    out = short_run / "traj-pages"
    j = _cli("traj", "view", "--store", str(store), "--task", t.task_id, "--out", str(out))
    page = out / "t" / f"{t.id}.html"
    assert str(page) in j["pages"] and Path(j["html"]) == out / "index.html"
    v = visit(page, {short_run / "screenshots" / f"trajectory-{k}.png": s for k, s in SIZES.items()})
    assert v.requests == 0 and v.console == [], v.console
    conv = v.dom.split('id="conversation"')[1].split("<h2>")[0]
    assert conv.count('class="msg tool step"') == len(t.steps) >= 2
    assert conv.count("assistant · turn") >= 2
    assert 'id="diff"' in v.dom and all(p in v.dom for p in t.diff["files"])
    assert 'id="per-test"' in v.dom and f"passed {t.tests.passed}" in v.dom
    assert 'id="components"' in v.dom and 'id="timings"' in v.dom
    idx = visit(out / "index.html")
    assert idx.requests == 0 and idx.console == [] and 'data-filter-ready="1"' in idx.dom
    assert f"t/{t.id}.html" in idx.dom
    # the filters run in the page: ?status=ok hides every row of another status
    shown = visit(out / "index.html", query="status=ok").dom
    rows = re.findall(r'<tr data-status="(\w+)"[^>]*?( hidden="")?>', shown)
    assert rows and all((st == "ok") == (not hidden) for st, hidden in rows)


PAYLOAD = "<script>document.body.setAttribute('data-pwned','1')</script><img src=x onerror=\"document.body.setAttribute('data-pwned','2')\">"

PWNED = re.compile(r"<body[^>]*data-pwned")  # the attribute the payload sets when it runs


def _view(tmp_path: Path, t: Trajectory) -> tuple[Path, dict]:
    """Store ``t`` in a fresh SQLite file and write its pages with ``sparring traj view``."""
    store = tmp_path / "s.db"
    s = SQLiteStore(store)
    s.put(t)
    s.close()
    return store, _cli("traj", "view", "--store", str(store), "--out", str(tmp_path / "pages"))


def test_candidate_markup_is_shown_never_run(tmp_path):
    """Positive control first: the payload, as raw markup, does run in Chromium. Then the same payload
    everywhere a candidate writes (message, tool arguments, tool output, file name and content,
    failing test id) is shown as text on the trajectory page and the index, and runs nowhere."""
    raw = tmp_path / "raw.html"
    raw.write_text(f"<!doctype html><html><body><p>x</p>{PAYLOAD}</body></html>")
    assert PWNED.search(visit(raw).dom), "positive control: the payload should run in a raw page"
    t = Trajectory(
        task_id=f"task{PAYLOAD}", task_digest="d", policy="p", status="ok", reward=0.5,
        flags=["test_tampering"], failing_tests=[f"test_x{PAYLOAD}"],
        messages=[{"role": "user", "content": "fix it"},
                  {"role": "assistant", "content": PAYLOAD, "tool_calls": [
                      {"id": "c1", "type": "function", "function": {"name": "run", "arguments": json.dumps({"cmd": PAYLOAD})}}]},
                  {"role": "tool", "tool_call_id": "c1", "content": PAYLOAD}],
        steps=[ToolStep(index=0, tool_call_id="c1", name="run", output=f"out {PAYLOAD}", exit_code=0)],
        diff={"files": {f"f{PAYLOAD}.py": {"text": PAYLOAD}}, "deleted": [PAYLOAD]},
    )  # fmt: skip
    store, j = _view(tmp_path, t)
    for p in (Path(j["pages"][0]), Path(j["html"])):
        v = visit(p)
        assert not PWNED.search(v.dom), f"candidate markup ran in {p.name}"
        assert "&lt;script&gt;document.body.setAttribute" in v.dom  # shown, as text
        assert v.console == [] and v.requests == 0
    assert 'data-filter-ready="1"' in visit(Path(j["html"])).dom  # the page's own script did run
    # The flagged trajectory lands in the review queue, and the queue item links to its page.
    _cli("review", "collect", "--store", str(store), "--db", str(tmp_path / "review.db"))
    items = _cli("review", "list", "--db", str(tmp_path / "review.db"), "--pages", str(tmp_path / "pages"))[
        "items"
    ]
    assert [i["page"] for i in items] == [Path(j["pages"][0]).resolve().as_uri()]


# "Trojan Source" (CVE-2021-42574): the override and isolates make the line *read* `if access != "user"`
# with the admin check hidden; on the page it must show its control characters, not obey them.
TROJAN = 'if access != "user\u202e \u2066// Check if admin\u2069 \u2066" {'
BIDI = re.compile("[\u202a-\u202e\u2066-\u2069]")


def test_candidate_bidi_controls_are_written_out_on_the_pages(tmp_path):
    """Positive control: HTML escaping alone keeps the bidi controls (so the page would reorder the text).
    Then a tool output, message, file name and failing test id with them: the trajectory page and the index
    carry none, in the file and in Chromium's DOM, and show each as its escape (\\u202e)."""
    import html

    assert BIDI.search(html.escape(TROJAN)), "positive control: plain escaping keeps the controls"
    t = Trajectory(
        task_id="task-bidi", task_digest="d", policy="p", status="ok", reward=0.0,
        failing_tests=[f"test_x{TROJAN}"],
        messages=[{"role": "user", "content": "fix it"}, {"role": "assistant", "content": TROJAN}],
        steps=[ToolStep(index=0, tool_call_id="c1", name="bash", output=TROJAN, exit_code=0)],
        diff={"files": {f"f{TROJAN}.py": {"text": TROJAN}}, "deleted": []},
    )  # fmt: skip
    _, j = _view(tmp_path, t)
    page_path = Path(j["pages"][0])
    for p in (page_path, Path(j["html"])):
        text = p.read_text(encoding="utf-8")
        assert not BIDI.search(text), f"a bidi control reached {p.name}"
    assert "\\u202e" in page_path.read_text(encoding="utf-8")
    dom = visit(page_path).dom
    assert not BIDI.search(dom) and "\\u2066// Check if admin\\u2069" in dom


def test_a_remote_resource_is_counted(tmp_path):
    """Positive control of the network check: a page that loads a remote image is seen fetching."""
    p = tmp_path / "remote.html"
    p.write_text("<!doctype html><html><body><img src='http://example.invalid/a.png'></body></html>")
    assert visit(p).requests >= 1


def test_report_without_matplotlib_names_the_extra(tmp_path):
    """The core install has no matplotlib: `sparring report` says which extra to install, in one line."""
    metrics = tmp_path / "metrics" / "run-z.jsonl"
    metrics.parent.mkdir()
    metrics.write_text(json.dumps({"step": 0, "rollout/reward_mean": 0.5, "rollout/pass_rate": 0.5}) + "\n")
    block = tmp_path / "block"
    block.mkdir()
    (block / "matplotlib.py").write_text("raise ImportError('no matplotlib here')\n")
    env = {**__import__("os").environ}
    env["PYTHONPATH"] = f"{block}:{env.get('PYTHONPATH', '')}"
    r = subprocess.run(
        [str(EXE), "report", str(tmp_path)], capture_output=True, text=True, timeout=120, env=env
    )
    assert r.returncode == 2 and "sparring[report]" in r.stderr and len(r.stderr.strip().splitlines()) == 1
