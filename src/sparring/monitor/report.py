"""``sparring report RUN``: reward curve, pass rate per tier and reward histograms of a run.

RUN is a run's metrics JSONL file, a workdir (its newest run is taken), or a
run id inside ``--workdir``. The report is one self-contained HTML file with
inline SVG charts (no plotting library needed) and, when matplotlib is
installed, the same charts as PNG files next to it.
"""

from __future__ import annotations

import html
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError

W, H, PAD = 520, 240, 40
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b")


def find_metrics(run: str, workdir: Path | None = None) -> Path:
    """The metrics JSONL of RUN (a file, a workdir, or a run id under workdir)."""
    p = Path(run)
    if p.is_file():
        return p
    if p.is_dir():
        files = sorted((p / "metrics").glob("*.jsonl"), key=lambda f: f.stat().st_mtime)
        if not files:
            raise ConfigError(
                f"{p} holds no run metrics (no metrics/*.jsonl): pass a run's workdir or metrics file"
            )
        return files[-1]
    if workdir is not None and (workdir / "metrics" / f"{run}.jsonl").is_file():
        return workdir / "metrics" / f"{run}.jsonl"
    raise ConfigError(
        f"run not found: {run} (pass a metrics .jsonl file, a run workdir, or a run id with --workdir)"
    )


def load_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            raise ConfigError(
                f"{path}:{i} is not a JSON line: the file is not a sparring metrics log"
            ) from None
    if not rows:
        raise ConfigError(f"{path} has no iterations yet")
    return rows


def series(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The data the charts draw: reward / pass curves, pass rate per tier, rewards per iteration."""
    steps = [int(r.get("step", i)) for i, r in enumerate(rows)]
    tiers: dict[str, list[tuple[int, float]]] = defaultdict(list)
    for s, r in zip(steps, rows, strict=True):
        for k, v in r.items():
            if k.startswith("rollout/pass_rate/tier") and isinstance(v, int | float):
                tiers[k.rsplit("/", 1)[1]].append((s, float(v)))
    return {
        "steps": steps,
        "reward_mean": [float(r.get("rollout/reward_mean", 0.0)) for r in rows],
        "pass_rate": [float(r.get("rollout/pass_rate", 0.0)) for r in rows],
        "tiers": dict(sorted(tiers.items())),
        "rewards": [list(r.get("rollout/rewards", [])) for r in rows],
        "alerts": sum(int(r.get("monitor/alerts", 0)) for r in rows),
    }


def _svg_lines(title: str, lines: dict[str, list[tuple[float, float]]], ymax: float = 1.0) -> str:
    xs = [x for pts in lines.values() for x, _ in pts] or [0.0]
    x0, x1 = min(xs), max(max(xs), min(xs) + 1)

    def sx(x: float) -> float:
        return PAD + (x - x0) / (x1 - x0) * (W - 2 * PAD)

    def sy(y: float) -> float:
        return H - PAD - y / ymax * (H - 2 * PAD)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img">',
             f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">{html.escape(title)}</text>',
             f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#444"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#444"/>',
             f'<text x="{PAD - 4}" y="{sy(ymax) + 4}" text-anchor="end" font-size="10">{ymax:g}</text>',
             f'<text x="{PAD - 4}" y="{sy(0) + 4}" text-anchor="end" font-size="10">0</text>',
             f'<text x="{W / 2}" y="{H - 8}" text-anchor="middle" font-size="11">iteration</text>']  # fmt: skip
    for i, (name, pts) in enumerate(lines.items()):
        c = COLORS[i % len(COLORS)]
        path = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
        parts.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="{path}"/>')
        parts += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{c}"/>' for x, y in pts]
        parts.append(
            f'<text x="{W - PAD + 2}" y="{PAD + 14 * i}" font-size="11" fill="{c}">{html.escape(name)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _svg_hist(title: str, groups: dict[str, list[float]], bins: int = 10) -> str:
    bw = (W - 2 * PAD) / bins
    counts = {k: [0] * bins for k in groups}
    for k, vs in groups.items():
        for v in vs:
            counts[k][min(max(int(v * bins), 0), bins - 1)] += 1
    peak = max([max(c) for c in counts.values()] + [1])
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img">',
             f'<text x="{W / 2}" y="18" text-anchor="middle" font-size="14">{html.escape(title)}</text>',
             f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#444"/>',
             f'<text x="{PAD}" y="{H - PAD + 14}" font-size="10">0</text>',
             f'<text x="{W - PAD}" y="{H - PAD + 14}" font-size="10" text-anchor="end">1 (reward)</text>']  # fmt: skip
    for i, (name, cs) in enumerate(counts.items()):
        c = COLORS[i % len(COLORS)]
        w = bw / max(len(counts), 1)
        for b, n in enumerate(cs):
            h = n / peak * (H - 2 * PAD)
            parts.append(f'<rect x="{PAD + b * bw + i * w:.1f}" y="{H - PAD - h:.1f}" width="{w - 1:.1f}" '
                         f'height="{h:.1f}" fill="{c}" opacity="0.8"/>')  # fmt: skip
        parts.append(
            f'<text x="{W - PAD}" y="{PAD + 14 * i}" font-size="11" fill="{c}" text-anchor="end">{html.escape(name)}</text>'
        )
    parts.append("</svg>")
    return "\n".join(parts)


def _hist_groups(data: dict[str, Any]) -> dict[str, list[float]]:
    """Rewards of the first, middle and last iterations."""
    rewards, steps = data["rewards"], data["steps"]
    picks = sorted({0, len(rewards) // 2, len(rewards) - 1})
    return {f"iteration {steps[i]}": [float(x) for x in rewards[i]] for i in picks if rewards[i]}


def render(data: dict[str, Any], title: str) -> dict[str, str]:
    """The three charts as SVG strings."""
    steps = data["steps"]
    return {
        "reward_curve": _svg_lines(
            "reward mean and pass rate",
            {
                "reward mean": list(zip(steps, data["reward_mean"], strict=True)),
                "pass rate": list(zip(steps, data["pass_rate"], strict=True)),
            },
        ),  # fmt: skip
        "pass_rate_per_tier": _svg_lines(
            "pass rate per tier", {k: [(float(x), y) for x, y in v] for k, v in data["tiers"].items()}
        ),
        "reward_histograms": _svg_hist("reward histograms", _hist_groups(data)),
    }


def _png(data: dict[str, Any], out: Path) -> list[Path]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    fig, ax = plt.subplots(figsize=(6, 3))
    ax.plot(data["steps"], data["reward_mean"], marker="o", label="reward mean")
    ax.plot(data["steps"], data["pass_rate"], marker="o", label="pass rate")
    ax.set_xlabel("iteration"), ax.set_ylim(0, 1), ax.legend()
    fig.tight_layout(), fig.savefig(out / "reward_curve.png"), plt.close(fig)
    written.append(out / "reward_curve.png")
    fig, ax = plt.subplots(figsize=(6, 3))
    for k, v in data["tiers"].items():
        ax.plot([x for x, _ in v], [y for _, y in v], marker="o", label=k)
    ax.set_xlabel("iteration"), ax.set_ylim(0, 1), ax.legend()
    fig.tight_layout(), fig.savefig(out / "pass_rate_per_tier.png"), plt.close(fig)
    written.append(out / "pass_rate_per_tier.png")
    fig, ax = plt.subplots(figsize=(6, 3))
    for k, v in _hist_groups(data).items():
        ax.hist(v, bins=10, range=(0, 1), alpha=0.6, label=k)
    ax.set_xlabel("reward"), ax.legend()
    fig.tight_layout(), fig.savefig(out / "reward_histograms.png"), plt.close(fig)
    written.append(out / "reward_histograms.png")
    return written


def write_report(metrics: Path, out: Path) -> dict[str, Any]:
    """Write report.html (and PNGs when matplotlib is present) under ``out``; returns what was written."""
    rows = load_rows(metrics)
    data = series(rows)
    out.mkdir(parents=True, exist_ok=True)
    charts = render(data, metrics.stem)
    body = "\n".join(f"<h2>{k.replace('_', ' ')}</h2>\n{v}" for k, v in charts.items())
    doc = (f"<!doctype html><html><head><meta charset='utf-8'><title>sparring report {html.escape(metrics.stem)}</title></head>"
           f"<body><h1>Run {html.escape(metrics.stem)}</h1><p>{len(rows)} iterations, {data['alerts']} alerts; "
           f"final pass rate {data['pass_rate'][-1]:.3f}</p>{body}</body></html>\n")  # fmt: skip
    (out / "report.html").write_text(doc)
    for k, v in charts.items():
        (out / f"{k}.svg").write_text(v)
    pngs = _png(data, out)
    return {
        "run": metrics.stem, "iterations": len(rows), "html": str(out / "report.html"),
        "svg": [str(out / f"{k}.svg") for k in charts], "png": [str(p) for p in pngs],
        "pass_rate_first": data["pass_rate"][0], "pass_rate_last": data["pass_rate"][-1], "alerts": data["alerts"],
    }  # fmt: skip
