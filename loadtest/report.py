"""Turn run records into the ASU view (per class and overall: latency percentiles, TPS, goodput under the
policy's SLOs, accuracy and correct goodput where answers are checkable, thinking tokens, shed and degraded counts,
KV occupancy and stragglers per tier), and write it as JSON and Markdown.

Goodput is defined before any run is made, the same for every target:
- goodput: requests that met their class's SLO, per second of the **arrival window** (an open loop's planned
  duration; a closed loop's whole run). Not per second of the run: a target whose slow requests drain for longer
  after the last arrival would otherwise look worse for having served them.
- undegraded goodput: the same, counting only requests served as asked (not `x-thinktier-degraded`: no cut budget,
  no other tier), so a target cannot gain goodput by serving less.
- correct goodput: requests whose checked answer was right and that met their SLO, per second of the window; None
  where the workload's answers cannot be checked.
Throughputs (achieved rate, TPS) stay per second of the whole run, tail included.

Chat prompts have no SLO class of their own in the policy; they are held to the `easy` SLO.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel

from thinktier.loadtest.client import RequestResult
from thinktier.loadtest.metrics_scraper import MetricsTimeline, TierSample
from thinktier.loadtest.runner import RunRecord
from thinktier.loadtest.workload import REQUEST_CLASSES
from thinktier.policies.schema import SLO, DifficultyClass

SLO_CLASS: dict[str, DifficultyClass] = {"easy": "easy", "medium": "medium", "hard": "hard", "chat": "easy"}


class Percentiles(BaseModel):
    count: int
    p50: float | None
    p90: float | None
    p99: float | None
    mean: float | None = None
    """None in reports saved before the mean was recorded."""

    @classmethod
    def of(cls, values: Sequence[float]) -> Percentiles:
        if not values:
            return cls(count=0, p50=None, p90=None, p99=None)
        array = np.asarray(values, dtype=float)
        p50, p90, p99 = np.percentile(array, [50, 90, 99])
        return cls(count=len(values), p50=float(p50), p90=float(p90), p99=float(p99), mean=float(array.mean()))


class ClassStats(BaseModel):
    """One difficulty class (or all requests together)."""

    requests: int
    ok: int
    shed: int
    """Refused with 429."""
    errors: int
    """Failed for any other reason (other HTTP status, broken stream, timeout)."""
    degraded: int
    """Served, but with a smaller budget or on another tier than asked (x-thinktier-degraded)."""
    borrowed: int = 0
    """Served with their own budget on capacity another tier lent (x-thinktier-borrowed)."""
    no_answer: int
    """Completed without a single answer (content) token, e.g. all budget spent thinking."""
    ttft_s: Percentiles
    ttfvt_s: Percentiles
    e2e_s: Percentiles
    thinking_tokens_mean: float | None
    thinking_tokens_p50: float | None
    answer_tokens_mean: float | None
    slo_met: int
    slo_attainment: float | None
    goodput_rps: float
    """slo_met per second of the arrival window."""
    tiers: dict[str, int]
    """Requests per tier the server reported (x-thinktier-tier)."""
    checked: int = 0
    """Ok requests whose prompt has a checkable answer. This and the fields below default for reports saved before
    answers were checked."""
    correct: int = 0
    """Checked requests whose visible answer was right."""
    accuracy: float | None = None
    """correct / checked; None when no ok request had a checkable answer."""
    correct_slo_met: int = 0
    """Requests whose answer was right and that met their SLO."""
    correct_goodput_rps: float | None = None
    """correct_slo_met per second, as goodput; None when no request's prompt had a checkable answer."""
    undegraded_slo_met: int = 0
    """Requests that met their SLO and were served as asked (not degraded)."""
    undegraded_goodput_rps: float = 0.0
    """undegraded_slo_met per second of the arrival window."""


class TierStats(BaseModel):
    """One tier's KV occupancy and stragglers over the run, from the scraped metrics."""

    tier: str
    samples: int
    kv_occupancy_mean: float | None
    kv_occupancy_max: float | None
    stragglers_mean: float | None
    stragglers_max: float | None
    replicas_max: int


class BatchStats(BaseModel):
    """One closed-loop batch: how long the whole batch waited for its slowest request."""

    batch: int
    makespan_s: float | None
    median_e2e_s: float | None
    straggler_ratio: float | None
    """makespan / median E2E: 1 when all finish together, large when one request holds the batch."""


class RunReport(BaseModel):
    label: str
    mode: str
    offered_rate_rps: float | None
    shape: float | None
    duration_s: float
    """The whole run, from the first request to the last response (the drain tail included)."""
    window_s: float | None = None
    """The arrival window that goodput is divided by; None in reports saved before it was recorded."""
    achieved_rate_rps: float
    """Requests answered (served, refused or failed) per second of the run, tail included."""
    tps: float
    """Completion tokens (thinking + answer) per second of the run."""
    answer_tps: float | None
    """Answer tokens per second; None when no successful request's thinking/answer split is known."""
    goodput_rps: float
    """Requests that met their SLO per second of the arrival window."""
    undegraded_goodput_rps: float = 0.0
    """The same, counting only requests that were not degraded."""
    correct_goodput_rps: float | None = None
    """Requests per second of the window that were right and met their SLO; None when no answer was checkable."""
    overall: ClassStats
    classes: dict[str, ClassStats]
    tiers: list[TierStats]
    batches: list[BatchStats]
    scrapes: int
    scrape_failures: int
    scrape_last_error: str | None
    timeline: list[TierSample]


class Report(BaseModel):
    target: str
    settings: dict[str, Any]
    slos: dict[DifficultyClass, SLO]
    runs: list[RunReport]


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def goodput_rps(met_slo: int, window_s: float) -> float:
    """Requests per second that met their class's SLO (`SLO.met`), over the arrival window `window_s`."""
    return met_slo / window_s if window_s > 0 else 0.0


def _met_slo(result: RequestResult, slos: dict[DifficultyClass, SLO]) -> bool:
    return result.ok and slos[SLO_CLASS[result.request_class]].met(result.ttfvt_s, result.e2e_s)


def class_stats(results: Sequence[RequestResult], slos: dict[DifficultyClass, SLO], window_s: float) -> ClassStats:
    ok = [r for r in results if r.ok]
    thinking = [float(r.reasoning_tokens) for r in ok if r.reasoning_tokens is not None]
    answers = [float(a) for r in ok if (a := r.answer_tokens) is not None]
    met = [r for r in results if _met_slo(r, slos)]
    checked = [r for r in ok if r.correct is not None]
    correct = sum(bool(r.correct) for r in checked)
    correct_met = sum(bool(r.correct) for r in met)
    undegraded_met = sum(not r.degraded for r in met)
    checkable = any(r.correct is not None for r in results)
    return ClassStats(
        requests=len(results),
        ok=len(ok),
        shed=sum(r.shed for r in results),
        errors=sum((not r.ok) and not r.shed for r in results),
        degraded=sum(r.degraded for r in results),
        borrowed=sum(r.borrowed for r in results),
        no_answer=sum(r.ttfvt_s is None for r in ok),
        ttft_s=Percentiles.of([r.ttft_s for r in ok if r.ttft_s is not None]),
        ttfvt_s=Percentiles.of([r.ttfvt_s for r in ok if r.ttfvt_s is not None]),
        e2e_s=Percentiles.of([r.e2e_s for r in ok if r.e2e_s is not None]),
        thinking_tokens_mean=_mean(thinking),
        thinking_tokens_p50=float(np.median(thinking)) if thinking else None,
        answer_tokens_mean=_mean(answers),
        slo_met=len(met),
        slo_attainment=len(met) / len(results) if results else None,
        goodput_rps=goodput_rps(len(met), window_s),
        tiers=dict(Counter(r.decision["tier"] for r in results if "tier" in r.decision)),
        checked=len(checked),
        correct=correct,
        accuracy=correct / len(checked) if checked else None,
        correct_slo_met=correct_met,
        correct_goodput_rps=goodput_rps(correct_met, window_s) if checkable else None,
        undegraded_slo_met=undegraded_met,
        undegraded_goodput_rps=goodput_rps(undegraded_met, window_s),
    )


def tier_stats(timeline: MetricsTimeline) -> list[TierStats]:
    stats = []
    for tier in sorted({s.tier for s in timeline.samples}):
        samples = [s for s in timeline.samples if s.tier == tier]
        kv = [s.kv_occupancy_mean for s in samples if s.kv_occupancy_mean is not None]
        kv_max = [s.kv_occupancy_max for s in samples if s.kv_occupancy_max is not None]
        stragglers = [s.stragglers for s in samples if s.stragglers is not None]
        stats.append(
            TierStats(
                tier=tier,
                samples=len(samples),
                kv_occupancy_mean=_mean(kv),
                kv_occupancy_max=max(kv_max) if kv_max else None,
                stragglers_mean=_mean(stragglers),
                stragglers_max=max(stragglers) if stragglers else None,
                replicas_max=max(s.replicas for s in samples),
            )
        )
    return stats


def batch_stats(results: Sequence[RequestResult]) -> list[BatchStats]:
    stats = []
    for batch in sorted({r.batch for r in results if r.batch is not None}):
        members = [r for r in results if r.batch == batch]
        e2e = [r.e2e_s for r in members if r.ok and r.e2e_s is not None]
        makespan = (
            max(r.start_s + r.e2e_s for r in members if r.e2e_s is not None) - min(r.start_s for r in members) if e2e else None
        )
        median = float(np.median(e2e)) if e2e else None
        ratio = makespan / median if makespan is not None and median else None
        stats.append(BatchStats(batch=batch, makespan_s=makespan, median_e2e_s=median, straggler_ratio=ratio))
    return stats


def run_report(record: RunRecord, slos: dict[DifficultyClass, SLO]) -> RunReport:
    results, duration = record.results, record.duration_s
    window = record.window_s if record.window_s is not None else duration
    overall = class_stats(results, slos, window)
    completion = sum(r.completion_tokens or 0 for r in results if r.ok)
    answers = [a for r in results if r.ok and (a := r.answer_tokens) is not None]
    return RunReport(
        label=record.label,
        mode=record.mode,
        offered_rate_rps=record.offered_rate,
        shape=record.shape,
        duration_s=duration,
        window_s=window,
        achieved_rate_rps=len(results) / duration if duration > 0 else 0.0,
        tps=completion / duration if duration > 0 else 0.0,
        answer_tps=(sum(answers) / duration if duration > 0 else 0.0) if answers else None,
        goodput_rps=overall.goodput_rps,
        undegraded_goodput_rps=overall.undegraded_goodput_rps,
        correct_goodput_rps=overall.correct_goodput_rps,
        overall=overall,
        classes={
            c: class_stats(members, slos, window)
            for c in REQUEST_CLASSES
            if (members := [r for r in results if r.request_class == c])
        },
        tiers=tier_stats(record.timeline),
        batches=batch_stats(results),
        scrapes=record.timeline.scrapes,
        scrape_failures=record.timeline.failures,
        scrape_last_error=record.timeline.last_error,
        timeline=list(record.timeline.samples),
    )


def build_report(target: str, settings: dict[str, Any], slos: dict[DifficultyClass, SLO], records: Sequence[RunRecord]) -> Report:
    return Report(target=target, settings=settings, slos=dict(slos), runs=[run_report(r, slos) for r in records])


def _fmt(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def _pcts(p: Percentiles) -> str:
    return " / ".join(_fmt(v) for v in (p.p50, p.p90, p.p99))


def markdown(report: Report) -> str:
    lines = [f"# Load test of {report.target}", "", "Settings: " + "; ".join(f"{k}: {v}" for k, v in report.settings.items()), ""]
    lines += [
        "SLOs (chat is held to easy): "
        + ", ".join(f"{c}: TTFVT <= {s.ttfvt_s:g} s, E2E <= {s.e2e_s:g} s" for c, s in report.slos.items())
    ]
    lines += [
        "",
        "## Summary",
        "",
        "Goodput counts requests within their SLO per second of the arrival window (not of the run: the drain after the "
        "last arrival does not count against a target); undegraded goodput counts only requests served as asked.",
        "",
        "| run | offered req/s | achieved req/s | TPS | goodput req/s | undegraded goodput req/s | correct goodput req/s "
        "| accuracy | SLO met | TTFVT p99 s | E2E p99 s | shed | degraded | borrowed | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for run in report.runs:
        o = run.overall
        lines.append(
            f"| {run.label} | {_fmt(run.offered_rate_rps)} | {_fmt(run.achieved_rate_rps)} | {_fmt(run.tps, 1)} | "
            f"{_fmt(run.goodput_rps)} | {_fmt(run.undegraded_goodput_rps)} | {_fmt(run.correct_goodput_rps)} | "
            f"{_fmt(o.accuracy)} | {_fmt(o.slo_attainment)} | "
            f"{_fmt(o.ttfvt_s.p99)} | {_fmt(o.e2e_s.p99)} | {o.shed} | {o.degraded} | {o.borrowed} | {o.errors} |"
        )
    for run in report.runs:
        window = "" if run.window_s is None else f", arrivals over {run.window_s:.1f} s"
        lines += ["", f"## {run.label} ({run.mode} loop, {run.duration_s:.1f} s{window})", ""]
        lines += [
            "| class | requests | ok | shed | degraded | errors | no answer | TTFVT p50/p90/p99 s | E2E p50/p90/p99 s | "
            "thinking tok/req | answer tok/req | SLO met | goodput req/s | accuracy | correct goodput req/s | tiers |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for name, c in [*run.classes.items(), ("all", run.overall)]:
            tiers = ", ".join(f"{t}: {n}" for t, n in sorted(c.tiers.items())) or "-"
            lines.append(
                f"| {name} | {c.requests} | {c.ok} | {c.shed} | {c.degraded} | {c.errors} | {c.no_answer} | {_pcts(c.ttfvt_s)} | "
                f"{_pcts(c.e2e_s)} | {_fmt(c.thinking_tokens_mean, 1)} | {_fmt(c.answer_tokens_mean, 1)} | "
                f"{_fmt(c.slo_attainment)} | {_fmt(c.goodput_rps)} | {_fmt(c.accuracy)} | {_fmt(c.correct_goodput_rps)} | "
                f"{tiers} |"
            )
        answer = _fmt(run.answer_tps, 1)
        lines += ["", f"TPS {run.tps:.1f} (answer only {answer}); achieved {run.achieved_rate_rps:.2f} req/s.", ""]
        if run.tiers:
            lines += [
                "| tier | KV occupancy mean | KV occupancy max | stragglers mean | stragglers max | replicas |",
                "|---|---|---|---|---|---|",
            ]
            lines += [
                f"| {t.tier} | {_fmt(t.kv_occupancy_mean)} | {_fmt(t.kv_occupancy_max)} | {_fmt(t.stragglers_mean)} | "
                f"{_fmt(t.stragglers_max)} | {t.replicas_max} |"
                for t in run.tiers
            ]
        else:
            lines.append(
                f"No tier metrics scraped ({run.scrapes} scrapes, {run.scrape_failures} failed: {run.scrape_last_error})."
            )
        if run.batches:
            lines += ["", "| batch | makespan s | median E2E s | makespan / median |", "|---|---|---|---|"]
            lines += [
                f"| {b.batch} | {_fmt(b.makespan_s)} | {_fmt(b.median_e2e_s)} | {_fmt(b.straggler_ratio)} |" for b in run.batches
            ]
    return "\n".join(lines) + "\n"


def write_requests(path: Path, records: Sequence[RunRecord]) -> None:
    """Every request of every run, one JSON object a line, for analysis the report does not do."""
    with path.open("w") as out:
        for record in records:
            for result in record.results:
                out.write(json.dumps({"run": record.label, **asdict(result)}) + "\n")


def write(report: Report, records: Sequence[RunRecord], out_dir: Path) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / "report.json", out_dir / "report.md", out_dir / "requests.jsonl"]
    paths[0].write_text(report.model_dump_json(indent=2))
    paths[1].write_text(markdown(report))
    write_requests(paths[2], records)
    return paths
