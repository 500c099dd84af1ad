"""KV- and straggler-aware autoscaling vs Ray Serve's ongoing-requests autoscaling, same load, same run.

The policy is served twice, once as written and once with the reasoning tier's
`autoscaling.signal` set to `ongoing_requests`, each time under the same seeded bursty
open-loop workload. Reported per variant: SLO attainment and goodput, TTFVT/E2E per class,
replica-seconds of the reasoning tier, and its replica count, KV occupancy and stragglers
over time (scraped from /metrics), as JSON, Markdown and one PNG.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thinktier.cluster.local import LocalCluster
from thinktier.loadtest.bench import scaling_compare
from thinktier.loadtest.client import RequestOptions
from thinktier.loadtest.report import RunReport, run_report
from thinktier.loadtest.runner import RunRecord, RunSettings, Target, run_open_loop
from thinktier.loadtest.workload import Mix, PromptPool, open_loop
from thinktier.policies.loader import load_policy, write_policy_variant

VARIANTS = ("kv_and_stragglers", "ongoing_requests")


@dataclass(frozen=True)
class Workload:
    rate: float
    shape: float
    duration_s: float
    mix: str
    seed: int
    effort: str | None
    max_prompt_chars: int


def variant_policy(policy_path: Path, tier: str, signal: str, out_dir: Path) -> Path:
    """A copy of the policy whose `tier` scales on `signal`, in `out_dir`."""

    def edit(data: dict[str, Any]) -> None:
        data["tiers"][tier].setdefault("autoscaling", {})["signal"] = signal

    return write_policy_variant(policy_path, edit, out_dir / f"policy-{signal}.yaml")


def replica_seconds(record: RunRecord, tier: str) -> float:
    """Integral of the tier's live replica count over the run (step function between scrapes)."""
    return scaling_compare.replica_seconds(sorted((s.t_s, s.replicas) for s in record.timeline.samples if s.tier == tier))


def timeline(record: RunRecord, tier: str) -> list[dict[str, Any]]:
    return [
        {"t_s": round(s.t_s, 2), "replicas": s.replicas, "kv_mean": s.kv_occupancy_mean, "kv_max": s.kv_occupancy_max,
         "stragglers": s.stragglers}
        for s in record.timeline.samples if s.tier == tier
    ]


def run_variant(policy_path: Path, workload: Workload, port: int) -> RunRecord:
    pool = PromptPool.builtin(["en"], max_chars=workload.max_prompt_chars)
    items = open_loop(pool, Mix.parse(workload.mix), workload.rate, workload.shape, workload.duration_s, workload.seed)
    options = RequestOptions(model="thinktier", reasoning_effort=workload.effort)  # type: ignore[arg-type]
    with LocalCluster(policy_path, port=port, progress=lambda line: print(f"[{policy_path.stem}] {line}", flush=True)) as c:
        target = Target(c.url, options=options)
        record = asyncio.run(
            run_open_loop(target, items, RunSettings(scrape_interval_s=0.5), policy_path.stem, workload.rate, workload.shape,
                          workload.duration_s)
        )
    return record


def summarise(signal: str, record: RunRecord, report: RunReport, tier: str) -> dict[str, Any]:
    overall = report.overall
    return {
        "signal": signal,
        "requests": overall.requests,
        "slo_attainment": overall.slo_attainment,
        "slo_misses": overall.requests - overall.slo_met,
        "goodput_rps": overall.goodput_rps,
        "ttfvt_p50_s": overall.ttfvt_s.p50,
        "ttfvt_p99_s": overall.ttfvt_s.p99,
        "e2e_p50_s": overall.e2e_s.p50,
        "e2e_p99_s": overall.e2e_s.p99,
        "replica_seconds": replica_seconds(record, tier),
        "max_replicas": max((s.replicas for s in record.timeline.samples if s.tier == tier), default=0),
        "duration_s": record.duration_s,
        "timeline": timeline(record, tier),
    }


def plot(results: list[dict[str, Any]], out: Path) -> None:
    import matplotlib.pyplot as plt

    from thinktier.loadtest.plots import save_figure

    fig, axes = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
    for result in results:
        points = result["timeline"]
        t = [p["t_s"] for p in points]
        axes[0].step(t, [p["replicas"] for p in points], where="post", label=result["signal"])
        axes[1].plot(t, [p["kv_mean"] or 0 for p in points], label=result["signal"])
        axes[2].plot(t, [p["stragglers"] or 0 for p in points], label=result["signal"])
    for ax, title in zip(axes, ("reasoning replicas", "KV occupancy (mean over replicas)", "stragglers"), strict=True):
        ax.set_ylabel(title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    axes[2].set_xlabel("seconds since the run started")
    save_figure(fig, out)


def markdown(results: list[dict[str, Any]], workload: Workload, command: str) -> str:
    base = results[1]
    lines = [
        "# Autoscaling on KV occupancy and stragglers vs Ray Serve's ongoing-requests policy",
        "",
        f"`{command}`",
        "",
        f"Open loop, Gamma arrivals (rate {workload.rate}/s, shape {workload.shape}), {workload.duration_s:.0f} s, "
        f"mix {workload.mix}, effort {workload.effort or 'policy default'}, seed {workload.seed}. "
        "Same machine, same run, one variant after the other.",
        "",
        "| autoscaling signal | requests | SLO misses | SLO attainment | goodput (req/s) | TTFVT p50 / p99 (s) "
        "| E2E p50 / p99 (s) | replica-seconds | max replicas |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def f(value: float | None, digits: int = 2) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for r in results:
        lines.append(
            f"| {r['signal']} | {r['requests']} | {r['slo_misses']} | {f(r['slo_attainment'])} | {f(r['goodput_rps'], 3)} "
            f"| {f(r['ttfvt_p50_s'])} / {f(r['ttfvt_p99_s'])} | {f(r['e2e_p50_s'])} / {f(r['e2e_p99_s'])} "
            f"| {f(r['replica_seconds'], 0)} | {r['max_replicas']} |"
        )
    kv = results[0]
    ratio = (kv["replica_seconds"] / base["replica_seconds"]) if base["replica_seconds"] else None
    lines += ["", f"Replica-seconds ratio (KV-aware / ongoing-requests): {f(ratio)}. "
              f"SLO misses: {kv['slo_misses']} vs {base['slo_misses']}.", "",
              "![replicas, KV occupancy and stragglers over time](autoscaling.png)", ""]
    return "\n".join(lines)


def run(policy_path: Path, tier: str, workload: Workload, out_dir: Path, port: int, command: str) -> list[dict[str, Any]]:
    out_dir.mkdir(parents=True, exist_ok=True)
    slos = load_policy(policy_path).slos
    results = []
    for signal in VARIANTS:
        variants = Path(tempfile.mkdtemp(prefix="thinktier-autoscaling-"))
        record = run_variant(variant_policy(policy_path, tier, signal, variants), workload, port)
        results.append(summarise(signal, record, run_report(record, slos), tier))
    (out_dir / "autoscaling.json").write_text(json.dumps({"command": command, "workload": workload.__dict__,
                                                           "results": results}, indent=1) + "\n")
    plot(results, out_dir / "autoscaling.png")
    (out_dir / "autoscaling.md").write_text(markdown(results, workload, command))
    return results
