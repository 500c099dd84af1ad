"""PNG plots of a load-test report: latency CDFs per class, KV occupancy and stragglers per tier over
time, and goodput against offered load (when rates were swept)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure
from PIL import Image

from thinktier.loadtest.report import Report, RunReport
from thinktier.loadtest.runner import RunRecord

if TYPE_CHECKING:
    from thinktier.loadtest.bench.scaling_compare import TracePoint
    from thinktier.loadtest.sim.sim_cluster import TimelinePoint


def save_figure(fig: Figure, path: Path, dpi: int = 110) -> Path:
    """Writes `fig` as a PNG of 256 colours (a plot has few; 40 % of matplotlib's full-colour bytes, so the committed
    results stay small enough to travel to the GPU machine beside its payload) and closes it."""
    buffer = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buffer, format="png", dpi=dpi)
    plt.close(fig)
    Image.open(buffer).convert("RGB").quantize(colors=256).save(path, format="PNG", optimize=True)
    return path


def latency_cdfs(record: RunRecord, path: Path) -> Path:
    """CDF of TTFVT and E2E per request class, one panel each."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for ax, metric, title in ((axes[0], "ttfvt_s", "TTFVT (first answer token)"), (axes[1], "e2e_s", "E2E")):
        for cls in sorted({r.request_class for r in record.results}):
            values = np.sort(
                [v for r in record.results if r.request_class == cls and r.ok and (v := getattr(r, metric)) is not None]
            )
            if len(values):
                ax.step(values, np.arange(1, len(values) + 1) / len(values), where="post", label=f"{cls} (n={len(values)})")
        ax.set(title=f"{title}, {record.label}", xlabel="seconds", ylabel="share of requests", ylim=(0, 1.02))
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize="small")
    return save_figure(fig, path)


def kv_timeline(run: RunReport, path: Path) -> Path:
    """KV occupancy (mean over replicas) and stragglers per tier against run time."""
    fig, (kv_ax, st_ax) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for tier in sorted({s.tier for s in run.timeline}):
        samples = [s for s in run.timeline if s.tier == tier]
        kv = [(s.t_s, s.kv_occupancy_mean) for s in samples if s.kv_occupancy_mean is not None]
        st = [(s.t_s, s.stragglers) for s in samples if s.stragglers is not None]
        if kv:
            kv_ax.plot(*zip(*kv, strict=True), label=tier)
        if st:
            st_ax.step(*zip(*st, strict=True), where="post", label=tier)
    kv_ax.set(title=f"KV cache occupancy per tier, {run.label}", ylabel="occupancy (0..1)", ylim=(0, 1.02))
    st_ax.set(title="Stragglers per tier", xlabel="seconds since start", ylabel="running stragglers")
    for ax in (kv_ax, st_ax):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small")
    if not run.timeline:
        kv_ax.text(0.5, 0.5, "no tier metrics were scraped", ha="center", va="center", transform=kv_ax.transAxes)
    return save_figure(fig, path)


def _by_offered_rate(report: Report) -> list[tuple[float, RunReport]]:
    """The open-loop runs with their offered rates, slowest first."""
    return sorted(((r.offered_rate_rps, r) for r in report.runs if r.offered_rate_rps is not None), key=lambda p: p[0])


def goodput_vs_load(report: Report, path: Path) -> Path:
    """Goodput and achieved throughput against offered rate, one point per open-loop run."""
    runs = _by_offered_rate(report)
    fig, ax = plt.subplots(figsize=(6, 4))
    offered = [rate for rate, _ in runs]
    ax.plot(offered, [r.achieved_rate_rps for _, r in runs], "o--", label="achieved req/s")
    ax.plot(offered, [r.goodput_rps for _, r in runs], "o-", label="goodput req/s (SLOs met)")
    top = max([*offered, 0.1])
    ax.plot([0, top], [0, top], ":", color="grey", label="ideal")
    ax.set(title="Goodput vs offered load", xlabel="offered req/s", ylabel="req/s")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return save_figure(fig, path)


def compare_goodput(reports: dict[str, list[Report]], path: Path) -> Path:
    """Goodput against offered rate, one line per compared target over every seed's runs: the median at each rate,
    with a bar from the lowest to the highest seed where a rate ran under more than one."""
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, seeds in reports.items():
        by_rate: dict[float, list[float]] = {}
        for report in seeds:
            for rate, run in _by_offered_rate(report):
                by_rate.setdefault(rate, []).append(run.goodput_rps)
        rates = sorted(by_rate)
        medians = [float(np.median(by_rate[r])) for r in rates]
        below = [m - min(by_rate[r]) for r, m in zip(rates, medians, strict=True)]
        above = [max(by_rate[r]) - m for r, m in zip(rates, medians, strict=True)]
        ax.errorbar(rates, medians, yerr=[below, above], fmt="o-", capsize=3, label=name)
    ax.set(title="Goodput vs offered load (median over seeds, bar: range)", xlabel="offered req/s",
           ylabel="goodput req/s (SLOs met)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    return save_figure(fig, path)


def class_p99_bars(reports: dict[str, Report], path: Path) -> Path:
    """TTFVT p99 of each request class, one bar per compared target (log scale: the spread is wide)."""
    classes = sorted({c for report in reports.values() for c in report.runs[0].classes})
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / max(len(reports), 1)
    for i, (name, report) in enumerate(reports.items()):
        stats = report.runs[0].classes
        values = [p99 if c in stats and (p99 := stats[c].ttfvt_s.p99) is not None else 0.0 for c in classes]
        ax.bar(np.arange(len(classes)) + i * width, values, width, label=name)
    ax.set_xticks(np.arange(len(classes)) + width * (len(reports) - 1) / 2, classes)
    ax.set(title="TTFVT p99 per request class", ylabel="seconds (log)", yscale="log")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize="small")
    return save_figure(fig, path)


def plan_timeline(points: Sequence[TimelinePoint], path: Path) -> Path:
    """A simulated cluster over time, per tier: replicas serving, mean KV occupancy, and stragglers."""
    fig, (rep_ax, kv_ax, st_ax) = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    for tier in sorted({p.tier for p in points}):
        series = [p for p in points if p.tier == tier]
        t = [p.t_s for p in series]
        rep_ax.step(t, [p.replicas for p in series], where="post", label=tier)
        kv_ax.plot(t, [p.kv_mean for p in series], label=tier)
        st_ax.plot(t, [p.stragglers for p in series], label=tier)
    rep_ax.set(title="Replicas serving per tier (simulated)", ylabel="replicas")
    kv_ax.set(title="KV cache occupancy, mean over replicas", ylabel="occupancy (0..1)", ylim=(0, 1.02))
    st_ax.set(title="Stragglers per tier", xlabel="simulated seconds", ylabel="running stragglers")
    for ax in (rep_ax, kv_ax, st_ax):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    return save_figure(fig, path)


def write_plots(report: Report, records: list[RunRecord], out_dir: Path) -> list[Path]:
    paths = []
    for run, record in zip(report.runs, records, strict=True):
        slug = run.label.replace("=", "").replace(" ", "_").replace("/", "_")
        paths.append(latency_cdfs(record, out_dir / f"latency_cdf_{slug}.png"))
        paths.append(kv_timeline(run, out_dir / f"kv_occupancy_{slug}.png"))
    if any(r.offered_rate_rps is not None for r in report.runs):
        paths.append(goodput_vs_load(report, out_dir / "goodput_vs_load.png"))
    return paths


def autoscaling_traces(traces: dict[str, Sequence[TracePoint]], tier: str, path: Path) -> Path:
    """Per config, the tier's replicas (routable solid, held dashed), mean KV occupancy and stragglers over time."""
    fig, axes = plt.subplots(3, 1, figsize=(10, 8), sharex=True)
    for name, points in traces.items():
        t = [p.t_s for p in points]
        line = axes[0].step(t, [p.routable for p in points], where="post", label=f"{name}: routable")[0]
        axes[0].step(t, [p.routable if p.held is None else p.held for p in points], where="post", linestyle="--",
                     color=line.get_color(), label=f"{name}: held (started)")
        axes[1].plot(t, [p.kv_mean or 0 for p in points], label=name)
        axes[2].plot(t, [p.stragglers or 0 for p in points], label=name)
    for ax, label in zip(axes, (f"{tier} replicas", "KV occupancy (mean)", "stragglers"), strict=True):
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    axes[2].set_xlabel("seconds since the load test started")
    return save_figure(fig, path)
