"""The run report's charts, drawn with matplotlib as SVG (and PNG) files.

matplotlib is the ``report`` extra, imported only here and only when a report is drawn, so
the core install stays light. Every chart has ticks and units on both axes, its legend below
the plot (never over the data, never clipped: ``bbox_inches="tight"``), and every line a
``gid`` (``series-NAME``) so a test can find each curve in the SVG.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparring.errors import ConfigError
from sparring.monitor.report_data import RunData, Series

# Colour-blind-safe (Okabe-Ito) palette; reward and pass rate also differ in dash and marker, so the
# two stay distinguishable where their values coincide.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000")
STATUS_COLORS = {"ok": "#009E73", "truncated": "#E69F00", "policy_error": "#CC79A7",
                 "infra_error": "#D55E00", "timeout": "#56B4E9"}  # fmt: skip
FIGSIZE = (7.0, 3.6)  # inches; at 100 dpi a 700 px wide chart, scaled to the column width by CSS
# The phone version: drawn narrow, so that scaled to a ~360 px screen its text stays ~12 px high.
NARROW = (4.2, 3.6)


@dataclass
class Chart:
    """One drawn chart: its name (stable id), title, SVG text (wide, and narrow for phones) and how
    many data points it shows."""

    name: str
    title: str
    svg: str
    points: int
    note: str = ""
    svg_narrow: str = ""


class _Sized:
    """pyplot with every new figure at one size: the drawers are drawn again for the phone version."""

    def __init__(self, plt: Any, size: tuple[float, float]) -> None:
        self._plt, self._size = plt, size

    def subplots(self, *a: Any, **k: Any) -> Any:
        return self._plt.subplots(*a, **{**k, "figsize": self._size})

    def __getattr__(self, name: str) -> Any:
        return getattr(self._plt, name)


def pyplot() -> Any:
    """matplotlib's pyplot on the non-interactive Agg backend, or a one-line error naming the extra."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(
            "`sparring report` draws with matplotlib, which is not installed: pip install 'sparring[report]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({
        "svg.fonttype": "none",  # text stays text: selectable, scales, small files
        "svg.hashsalt": "sparring",  # stable ids: the same run draws the same file
        "font.size": 10, "axes.titlesize": 11, "axes.grid": True, "grid.alpha": 0.3,
        "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
    })  # fmt: skip
    return plt


def _finish(plt: Any, fig: Any, ax: Any, name: str, xlabel: str, ylabel: str, legend: bool = True) -> Any:
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if xlabel == "iteration":
        lo, hi = ax.get_xlim()
        if hi - lo < 2:  # one iteration: one whole tick, not a fractional scale around it
            mid = round((lo + hi) / 2)
            ax.set_xlim(mid - 0.5, mid + 0.5)
            ax.set_xticks([mid])
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True, nbins=8))
    ax.yaxis.set_major_locator(MaxNLocator(nbins=6))
    handles, labels = ax.get_legend_handles_labels()
    for other in fig.axes:
        if other is not ax:
            h2, l2 = other.get_legend_handles_labels()
            handles, labels = handles + h2, labels + l2
    if legend and handles:
        ncol = min(len(handles), 4)
        fig.legend(handles, labels, loc="lower center", ncol=ncol, bbox_to_anchor=(0.5, 0.0), fontsize=9)
        fig.tight_layout(rect=(0, 0.06 + 0.06 * ((len(handles) - 1) // ncol), 1, 1))
    else:
        fig.tight_layout()
    return fig


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg", bbox_inches="tight")
    svg = buf.getvalue()
    return svg[svg.index("<svg") :]  # drop the XML prolog and doctype: the SVG is inlined in HTML


def _lines(
    plt: Any, name: str, series: list[Series], ylabel: str, *, unit_range: bool = False,
    styles: list[dict[str, Any]] | None = None,
) -> tuple[Any, int]:  # fmt: skip
    fig, ax = plt.subplots(figsize=FIGSIZE)
    n = 0
    for i, s in enumerate(series):
        style = {"color": PALETTE[i % len(PALETTE)], "marker": "o", "markersize": 4, "linewidth": 1.8}
        style.update((styles or [{}] * len(series))[i] if styles and i < len(styles) else {})
        (line,) = ax.plot(s.x, s.y, label=s.label, **style)
        line.set_gid(f"series-{_slug(s.label)}")
        n += len(s)
    if unit_range:
        ax.set_ylim(-0.03, 1.03)
    return _finish(plt, fig, ax, name, "iteration", ylabel), n


def _slug(s: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in s.lower()).strip("_")


def reward_pass(plt: Any, d: RunData) -> tuple[Any, int]:
    """Reward mean and pass rate: different colour, dash and marker, so coinciding curves both show."""
    return _lines(
        plt, "reward_pass",
        [d.series("rollout/pass_rate", "pass rate"), d.series("rollout/reward_mean", "reward mean")],
        "pass rate / reward (0-1)", unit_range=True,
        styles=[{"color": PALETTE[0], "linewidth": 3.0, "marker": "o", "markersize": 7, "alpha": 0.75},
                {"color": PALETTE[1], "linestyle": "--", "linewidth": 1.8, "marker": "s", "markersize": 4}],
    )  # fmt: skip


def heldout(plt: Any, d: RunData) -> tuple[Any, int]:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    groups = [("RL run", d.heldout)] + ([("control (no RL)", d.control)] if d.control else [])
    n = 0
    width = 0.35
    for gi, (label, h) in enumerate(groups):
        xs = [i + (gi - (len(groups) - 1) / 2) * width for i in range(2)]
        ys = [h.get("before_rl", float("nan")), h.get("after_rl", float("nan"))]
        bars = ax.bar(xs, ys, width * 0.95, label=label, color=PALETTE[gi * 2], gid=f"series-{_slug(label)}")
        ax.bar_label(bars, fmt="%.3f", fontsize=9, padding=2)
        n += sum(1 for y in ys if y == y)
    ax.set_xticks([0, 1], ["before RL", "after RL"])
    ax.set_ylim(0, 1.12)
    return _finish(plt, fig, ax, "heldout", "held-out evaluation", "pass rate (0-1)"), n


def response_length(plt: Any, d: RunData) -> tuple[Any, int]:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    n = 0
    for i, (key, label) in enumerate((("response_length/mean", "mean"), ("response_length/max", "max"))):
        s = d.series(key, label + " (tokens)")
        (line,) = ax.plot(s.x, s.y, marker="o", markersize=4, color=PALETTE[i], label=s.label)
        line.set_gid(f"series-{_slug(label)}")
        n += len(s)
    ax2 = ax.twinx()
    s = d.series("response_length/clip_ratio", "truncated share (right axis)")
    (line,) = ax2.plot(s.x, s.y, linestyle=":", marker="^", color=PALETTE[3], label=s.label)
    line.set_gid("series-truncated_share")
    ax2.set_ylim(-0.03, 1.03)
    ax2.set_ylabel("share of turns at the token limit")
    ax2.grid(False)
    n += len(s)
    return _finish(plt, fig, ax, "response_length", "iteration", "tokens per turn"), n


def stacked(
    plt: Any, name: str, series: list[Series], ylabel: str, colors: dict[str, str] | None = None
) -> tuple[Any, int]:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    bottom: list[float] = [0.0] * (len(series[0]) if series else 0)
    for i, s in enumerate(series):
        c = (colors or {}).get(s.label, PALETTE[i % len(PALETTE)])
        ax.bar(s.x, s.y, 0.7, bottom=bottom, label=s.label, color=c, gid=f"series-{_slug(s.label)}")
        bottom = [b + y for b, y in zip(bottom, s.y, strict=True)]
    return _finish(plt, fig, ax, name, "iteration", ylabel), sum(len(s) for s in series)


def throughput(plt: Any, d: RunData) -> tuple[Any, int]:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    s = d.series("rollout/throughput_per_min", "rollouts per minute")
    (line,) = ax.plot(s.x, s.y, marker="o", markersize=4, color=PALETTE[0], label=s.label)
    line.set_gid("series-rollouts_per_minute")
    ax2 = ax.twinx()
    t = d.series("rollout/tokens_per_s", "sampled tokens per second (right axis)")
    (line,) = ax2.plot(t.x, t.y, linestyle="--", marker="s", markersize=4, color=PALETTE[1], label=t.label)
    line.set_gid("series-tokens_per_second")
    ax2.set_ylabel("tokens / s")
    ax2.grid(False)
    return _finish(plt, fig, ax, "throughput", "iteration", "rollouts / min"), len(s) + len(t)


def histograms(plt: Any, d: RunData) -> tuple[Any, int]:
    """Step outlines side by side, so no group's bars cover another's (or the legend)."""
    groups = d.reward_groups()
    fig, ax = plt.subplots(figsize=FIGSIZE)
    n = 0
    for i, (label, vs) in enumerate(groups.items()):
        ax.hist(vs, bins=10, range=(0, 1), histtype="step", linewidth=2.0, color=PALETTE[i], label=label,
                gid=f"series-{_slug(label)}")  # fmt: skip
        n += len(vs)
    ax.set_xlim(0, 1)
    return _finish(plt, fig, ax, "reward_histograms", "reward (0-1)", "samples"), n


def drift_alerts(plt: Any, d: RunData) -> tuple[Any, int]:
    fig, ax = plt.subplots(figsize=FIGSIZE)
    a = d.alerts()
    ax.bar(a.x, a.y, 0.6, color=PALETTE[1], alpha=0.6, label="alerts raised", gid="series-alerts")
    n = len(a)
    psis = d.psi()
    if psis:
        ax2 = ax.twinx()
        for i, s in enumerate(psis):
            (line,) = ax2.plot(s.x, s.y, marker="o", markersize=4, color=PALETTE[(i + 2) % len(PALETTE)],
                               label=f"PSI {s.label} (right axis)")  # fmt: skip
            line.set_gid(f"series-psi_{_slug(s.label)}")
            n += len(s)
        ax2.set_ylabel("reward drift (PSI)")
        ax2.grid(False)
    return _finish(plt, fig, ax, "drift_alerts", "iteration", "alerts (count)"), n


def _simple(key: str, label: str, ylabel: str, *fallbacks: str) -> Callable[[Any, RunData], tuple[Any, int]]:
    def draw(plt: Any, d: RunData) -> tuple[Any, int]:
        return _lines(plt, key, [d.first(key, *fallbacks, label=label)], ylabel)

    return draw


NO_UPDATE = "no update logged: no GRPO update ran in this run (every batch was skipped, or RL was off)"

# (name, title, drawer, what an empty chart means)
CHARTS: list[tuple[str, str, Callable[[Any, RunData], tuple[Any, int]], str]] = [
    ("reward_pass", "Reward mean and pass rate", reward_pass, ""),
    ("heldout", "Held-out pass rate before and after RL", heldout, "no held-out evaluation logged"),
    ("loss", "Policy loss", _simple("train/loss", "loss", "loss (per token)", "actor/pg_loss"), NO_UPDATE),
    ("kl", "KL to the reference policy", _simple("train/kl", "KL", "KL (nats per token)", "actor/ppo_kl"), NO_UPDATE),
    ("entropy", "Policy entropy", _simple("actor/entropy", "entropy", "entropy (nats per token)"), ""),
    ("grad_norm", "Gradient norm", _simple("train/grad_norm", "grad norm", "L2 norm (before clipping)", "actor/grad_norm"), NO_UPDATE),
    ("clip_frac", "Clip fraction", _simple("train/clip_frac", "clip fraction", "share of tokens clipped", "actor/pg_clipfrac"), NO_UPDATE),
    ("learning_rate", "Learning rate", _simple("actor/lr", "learning rate", "learning rate", "train/lr"), ""),
    ("response_length", "Response length", response_length, ""),
    ("statuses", "Rollout statuses", lambda plt, d: stacked(plt, "statuses", d.statuses(), "rollouts", STATUS_COLORS), ""),
    ("throughput", "Throughput", throughput, ""),
    ("stage_time", "Time per stage", lambda plt, d: stacked(plt, "stage_time", d.stage_seconds(), "seconds (summed over rollouts)"), ""),
    ("pass_rate_tier", "Pass rate per tier", lambda plt, d: _lines(plt, "pass_rate_tier", d.grouped("rollout/pass_rate/", lambda n: n.startswith("tier")), "pass rate (0-1)", unit_range=True), ""),
    ("pass_rate_family", "Pass rate per family", lambda plt, d: _lines(plt, "pass_rate_family", d.grouped("rollout/pass_rate/", lambda n: not n.startswith("tier")), "pass rate (0-1)", unit_range=True), ""),
    ("reward_histograms", "Reward histograms (first, middle, last iteration)", histograms, ""),
    ("curriculum", "Curriculum state", lambda plt, d: _lines(plt, "curriculum", [d.series("curriculum/mean_pass_posterior", "mean pass posterior"), d.series("curriculum/frontier_frac", "frontier share (0.2-0.8)"), d.series("curriculum/parked_frac", "parked share")], "share of tasks (0-1)", unit_range=True), ""),
    ("drift_alerts", "Reward drift and alerts", drift_alerts, ""),
]  # fmt: skip


def draw_all(d: RunData, out: Path | None = None, png: bool = False) -> list[Chart]:
    """Every chart of the report; with ``out`` each is also written there as NAME.svg (and NAME.png)."""
    plt = pyplot()
    charts = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    for name, title, draw, empty in CHARTS:
        fig, n = draw(plt, d)
        try:
            svg = _svg(fig)
            if out is not None:
                (out / f"{name}.svg").write_text(svg)
                if png:
                    fig.savefig(out / f"{name}.png", format="png", dpi=150, bbox_inches="tight")
        finally:
            plt.close(fig)
        narrow_fig, _ = draw(_Sized(plt, NARROW), d)
        try:  # its series ids are prefixed: one HTML document holds both versions
            narrow = _svg(narrow_fig).replace('id="series-', 'id="narrow-series-')
        finally:
            plt.close(narrow_fig)
        charts.append(Chart(name, title, svg, n, "" if n else empty or "not logged in this run", narrow))
    return charts
