"""``sparring report RUN``: a run's static report site (``index.html`` plus assets).

RUN is a run's metrics JSONL file, a workdir (its newest run is taken), or a run id inside
``--workdir``. The page inlines every chart as SVG (drawn by matplotlib, the ``report``
extra), so it opens offline from disk; ``assets/`` holds the same charts as SVG and PNG
files. The trajectory pages (:mod:`sparring.monitor.trajpages`) are linked when the CLI
passes the run's trajectories.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sparring.monitor.charts import Chart, draw_all
from sparring.monitor.report_data import RunData, find_metrics, load_rows, load_run, skill_from_evals
from sparring.monitor.site import esc, fmt, kv, page

__all__ = ["find_metrics", "load_rows", "write_report"]


def _figure(c: Chart) -> str:
    inner = (f"<div class='wide'>{c.svg}</div><div class='narrow'>{c.svg_narrow}</div>" if c.points
             else f"<div class='empty'>{esc(c.note)}</div>")  # fmt: skip
    return (f"<figure class='chart' id='chart-{esc(c.name)}' data-chart='{esc(c.name)}' data-points='{c.points}'>"
            f"<figcaption>{esc(c.title)}</figcaption>{inner}</figure>")  # fmt: skip


def _alerts_table(alerts: list[dict[str, Any]]) -> str:
    if not alerts:
        return "<p class='muted'>No alert was raised.</p>"
    rows = "".join(
        f"<tr><td class='num'>{esc(a.get('iteration'))}</td><td>{esc(a.get('rule'))}</td><td>{esc(a.get('detail'))}</td></tr>"
        for a in alerts
    )
    return f"<div class='scroll'><table><tr><th class='num'>iteration</th><th>rule</th><th>detail</th></tr>{rows}</table></div>"


def _summary(d: RunData, alerts: list[dict[str, Any]], traj_link: str | None) -> str:
    last = d.iterations[-1] if d.iterations else {}
    h = d.heldout
    pairs: list[tuple[str, Any]] = [
        ("run", esc(d.run)),
        ("iterations", esc(len(d.iterations))),
        ("last pass rate", esc(fmt(last.get("rollout/pass_rate")))),
        ("last reward mean", esc(fmt(last.get("rollout/reward_mean")))),
        ("held-out pass rate", esc(f"{fmt(h.get('before_rl'))} before RL, {fmt(h.get('after_rl'))} after")
         if h else "<span class='muted'>not logged</span>"),
    ]  # fmt: skip
    skill = skill_from_evals(d.evals)
    for key, label in (("inspect_first", "inspect-first share"), ("pass_if_inspect", "pass rate | inspected first"),
                       ("pass_if_not", "pass rate | acted first")):  # fmt: skip
        if skill:  # look before acting (shell-look): what RL changed, per episode
            before, after = (fmt(skill.get(p, {}).get(key)) for p in ("before_rl", "after_rl"))
            pairs.append((label, esc(f"{before} before RL, {after} after")))
    if d.control:
        pairs.append(
            ("control (no RL)", esc(f"{fmt(d.control.get('before_rl'))} → {fmt(d.control.get('after_rl'))}"))
        )
    pairs.append(
        (
            "alerts",
            esc(len(alerts) if alerts else sum(int(r.get("monitor/alerts", 0) or 0) for r in d.iterations)),
        )
    )
    if traj_link:
        pairs.append(("trajectories", f"<a href='{esc(traj_link)}'>browse the run's trajectories</a>"))
    pairs.append(("generated", esc(time.strftime("%Y-%m-%d %H:%M:%S"))))
    return kv(pairs)


def write_report(
    metrics: Path,
    out: Path,
    *,
    control: Path | None = None,
    heldout: dict[str, float] | None = None,
    alerts: list[dict[str, Any]] | None = None,
    traj_link: str | None = None,
    png: bool = True,
    warn: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Write ``out/index.html`` and ``out/assets/*`` for the run logged in ``metrics``.

    ``heldout`` / ``alerts`` come from the run's stored summary when the log lacks them (runs
    logged before evaluations went to the log); ``traj_link`` is the relative URL of its
    trajectory pages; ``warn`` hears what was skipped (a torn last line). Returns the
    ``sparring report --json`` object."""
    d = load_run(metrics, control, warn)
    if not d.heldout and heldout:
        d.heldout = {k: v for k, v in heldout.items() if k in ("before_rl", "after_rl")}
    assets = out / "assets"
    charts = draw_all(d, assets, png=png)
    figures = "\n".join(_figure(c) for c in charts)
    nav = " ".join(f"<a href='#chart-{esc(c.name)}'>{esc(c.title)}</a>" for c in charts)
    body = (
        f"<h1>Run {esc(d.run)}</h1>{_summary(d, alerts or [], traj_link)}"
        f"<details><summary>Charts</summary><nav>{nav}</nav></details>"
        f"<h2>Charts</h2><div class='grid'>{figures}</div>"
        f"<h2>Alerts</h2>{_alerts_table(alerts or [])}"
    )
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(page(f"sparring report {d.run}", body))
    pngs = sorted(str(p) for p in assets.glob("*.png")) if png else []
    pr = [float(r.get("rollout/pass_rate", 0.0)) for r in d.iterations] or [0.0]
    return {
        "run": d.run, "iterations": len(d.iterations), "html": str(index),
        "charts": [c.name for c in charts], "empty_charts": [c.name for c in charts if not c.points],
        "svg": [str(assets / f"{c.name}.svg") for c in charts], "png": pngs,
        "heldout": d.heldout, "pass_rate_first": pr[0], "pass_rate_last": pr[-1],
        "alerts": len(alerts) if alerts is not None else sum(int(r.get("monitor/alerts", 0) or 0) for r in d.iterations),
    }  # fmt: skip
