"""What a run measures (pure): per-request records and engine samples, their summary per workload (latency per
class, throughput, goodput, KV and offload figures), and the Markdown table of reports."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from thinktier.loadtest.bench.gpu.gpu_workload import CLASSES
from thinktier.loadtest.report import Percentiles, goodput_rps
from thinktier.policies.schema import SLO, DifficultyClass


@dataclass
class RequestRecord:
    index: int
    difficulty: DifficultyClass
    sent_s: float
    ttft_s: float | None = None
    ttfvt_s: float | None = None
    e2e_s: float | None = None
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    finish_reason: str | None = None
    priority: int = 0
    """The vLLM priority it was sent with; in deadline order its deadline, in milliseconds since the epoch."""
    preemptions: int = 0
    """Times the engine preempted it (known once it finishes)."""


@dataclass
class Sample:
    t_s: float
    kv_occupancy: float
    num_running: int
    num_waiting: int
    preemptions_total: int
    generation_tokens_total: int
    offload_store_bytes_total: float
    offload_load_bytes_total: float
    resumed_from_host_total: int = 0
    preempted_tokens_total: int = 0
    loaded_tokens_total: int = 0
    recomputed_tokens_total: int = 0
    """The last four: preempt-offload only (engine.kv_offloading.mode 'preempted')."""
    resume_lookups_total: int = 0
    resume_lookup_tokens_total: int = 0
    resume_prefix_hits_total: int = 0
    """vLLM's prefix-cache lookups of previously preempted requests, their tokens, and those found on the GPU."""


def class_summary(records: Sequence[RequestRecord], slo: SLO) -> dict[str, Any]:
    done = [r for r in records if r.e2e_s is not None]
    e2e = [r.e2e_s for r in records if r.e2e_s is not None]
    return {
        "sent": len(records),
        "finished": len(done),
        "met_slo": sum(slo.met(r.ttfvt_s, r.e2e_s) for r in records),
        "ttft_s": Percentiles.of([r.ttft_s for r in records if r.ttft_s is not None]).model_dump(),
        "ttfvt_s": Percentiles.of([r.ttfvt_s for r in done if r.ttfvt_s is not None]).model_dump(),
        "e2e_s": Percentiles.of(e2e).model_dump(),
        "e2e_mean_s": float(np.mean(e2e)) if e2e else None,
        "mean_reasoning_tokens": float(np.mean([r.reasoning_tokens for r in done])) if done else None,
        "mean_answer_tokens": float(np.mean([r.answer_tokens for r in done])) if done else None,
        "preemptions": sum(r.preemptions for r in done),
        "preempted_requests": sum(r.preemptions > 0 for r in done),
    }


def summarize(
    records: Sequence[RequestRecord],
    samples: Sequence[Sample],
    slos: dict[DifficultyClass, SLO],
    wall_s: float,
    duration_s: float,
) -> dict[str, Any]:
    """One workload on one configuration: per-class latency, throughput, goodput, KV and offload figures.

    `samples` (at least two: before the first request and after the last) carry the engine's counters."""
    per_class = {k: class_summary([r for r in records if r.difficulty == k], slos[k]) for k in CLASSES}
    met = sum(c["met_slo"] for c in per_class.values())
    kv = [s.kv_occupancy for s in samples]
    first, last = samples[0], samples[-1]
    generated = last.generation_tokens_total - first.generation_tokens_total
    return {
        "wall_s": round(wall_s, 2),
        "sent": len(records),
        "finished": sum(r.e2e_s is not None for r in records),
        "output_tokens": generated,
        "output_tokens_per_s": generated / wall_s if wall_s > 0 else 0.0,
        "met_slo": met,
        "goodput_rps": goodput_rps(met, duration_s),
        "per_class": per_class,
        "kv_occupancy_mean": float(np.mean(kv)),
        "kv_occupancy_peak": float(np.max(kv)),
        "time_at_full_kv_share": float(np.mean([k >= 0.98 for k in kv])),
        "preemptions": last.preemptions_total - first.preemptions_total,
        "offload_store_gib": (last.offload_store_bytes_total - first.offload_store_bytes_total) / 2**30,
        "offload_load_gib": (last.offload_load_bytes_total - first.offload_load_bytes_total) / 2**30,
        "preemptions_resumed_from_host": last.resumed_from_host_total - first.resumed_from_host_total,
        "preempted_tokens": last.preempted_tokens_total - first.preempted_tokens_total,
        "loaded_tokens": last.loaded_tokens_total - first.loaded_tokens_total,
        "recomputed_tokens": last.recomputed_tokens_total - first.recomputed_tokens_total,
        "resume_lookups": last.resume_lookups_total - first.resume_lookups_total,
        "resume_gpu_misses": (last.resume_lookup_tokens_total - first.resume_lookup_tokens_total)
        - (last.resume_prefix_hits_total - first.resume_prefix_hits_total),
        "timeline": [asdict(s) for s in samples[:: max(1, math.ceil(len(samples) / 120))]],
        "requests": [asdict(r) for r in records],
    }


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _per_preemption(workload: dict[str, Any]) -> str:
    """Recomputed tokens per preemption where preempt-offload counted them (older reports lack the field)."""
    if not workload.get("preempted_tokens") or not workload["preemptions"]:
        return "-"
    return f"{workload['recomputed_tokens'] / workload['preemptions']:,.0f}"


def _misses_per_resume(workload: dict[str, Any]) -> str:
    """Tokens a preempted request did not find in vLLM's GPU prefix cache, per lookup: without a connector, what it
    recomputes when admitted; with preempt-offload, what it loads from host memory or recomputes. A request that waits
    is looked up at every step until admitted, so this is an average over waiting steps, not over resumes (older
    reports lack the field)."""
    if not workload.get("resume_lookups"):
        return "-"
    return f"{workload['resume_gpu_misses'] / workload['resume_lookups']:,.0f}"


def _decode_rate(workload: dict[str, Any], klass: DifficultyClass = "easy") -> str:
    """Median tokens per second a request of `klass` decoded after its first token, over those never preempted: the
    engine's step time as a request sees it, which copies or prefill in the same steps slow down ("-" for reports
    without per-request records, such as `bench gpu simulate`'s)."""
    rates = [
        (r["reasoning_tokens"] + r["answer_tokens"]) / (r["e2e_s"] - r["ttft_s"])
        for r in workload.get("requests", ())
        if r["difficulty"] == klass and r.get("preemptions") == 0 and r["e2e_s"] is not None and r["e2e_s"] > r["ttft_s"]
    ]
    return "-" if not rates else f"{float(np.median(rates)):.0f}"


def _by_class(workload: dict[str, Any]) -> str:
    """Preemptions of finished easy / medium / hard requests (older reports lack the count)."""
    counts = [workload["per_class"][k].get("preemptions") for k in CLASSES]
    return "-" if None in counts else " / ".join(str(n) for n in counts)


def markdown_table(reports: Sequence[dict[str, Any]]) -> str:
    """One row per configuration and workload of the given `run` reports, in their order."""
    head = (
        "| config | workload | KV capacity (tokens) | output tok/s | goodput (req/s) | met SLO | "
        "easy TTFVT p50 / p99 (s) | easy E2E p50 / p99 (s) | easy decode tok/s (never preempted) | medium E2E p50 / p99 (s) | "
        "hard TTFVT p50 / p99 (s) | hard E2E p50 / p90 / p99 (s) | hard E2E mean (s) | hard finished | KV mean / peak | "
        "preemptions | of finished easy / medium / hard | "
        "offload out / in (GiB) | resumed from host | recomputed tokens per preemption | GPU cache misses per resume lookup |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for report in reports:
        for result in report["results"]:
            for name, w in result["workloads"].items():
                c = w["per_class"]

                def pp(klass: str, metric: str, c: dict[str, Any] = c, qs: tuple[str, ...] = ("p50", "p99")) -> str:
                    return " / ".join(_fmt(c[klass][metric][q]) for q in qs)

                lines.append(
                    f"| {result['config']} | {name} | {result['kv_capacity_tokens']:,} | {w['output_tokens_per_s']:,.0f} | "
                    f"{w['goodput_rps']:.2f} | {w['met_slo']}/{w['sent']} | {pp('easy', 'ttfvt_s')} | {pp('easy', 'e2e_s')} | "
                    f"{_decode_rate(w)} | {pp('medium', 'e2e_s')} | {pp('hard', 'ttfvt_s')} | "
                    f"{pp('hard', 'e2e_s', qs=('p50', 'p90', 'p99'))} | "
                    f"{_fmt(c['hard'].get('e2e_mean_s'))} | "
                    f"{c['hard']['finished']}/{c['hard']['sent']} | "
                    f"{w['kv_occupancy_mean']:.0%} / {w['kv_occupancy_peak']:.0%} | "
                    f"{w['preemptions']} | {_by_class(w)} | {w['offload_store_gib']:.1f} / {w['offload_load_gib']:.1f} | "
                    f"{w.get('preemptions_resumed_from_host', '-')} | {_per_preemption(w)} | {_misses_per_resume(w)} |"
                )
    return "\n".join(lines) + "\n"
