"""The full-stack summary: a row per policy from its saved NAME-fullstack.json and NAME-report.json, as the SUMMARY
line printed after each policy and the table in fullstack.md."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from thinktier.loadtest.bench.fullstack.fullstack_record import IDLE_ANSWER_TOKENS, ConfigRun, CpuStat, saved_runs
from thinktier.loadtest.report import Percentiles, Report
from thinktier.loadtest.workload import REQUEST_CLASSES

IDLE_AIM_S = 3.0
"""The issue's aim: an IDLE_ANSWER_TOKENS-token chat reply on an idle GPU in under this many seconds."""


@dataclass(frozen=True)
class SummaryRow:
    """One policy's line in fullstack.md."""

    name: str
    error: str | None
    requests: int | None
    ok: int | None
    errors: int | None
    no_response: int | None
    ttfvt: dict[str, Percentiles]
    goodput_rps: float | None
    output_tps: float | None
    ingress: CpuStat | None
    proxy: CpuStat | None
    idle_e2e_s: float | None
    kv_peak: dict[str, float | None]


def summary_row(record: ConfigRun, report: Report | None) -> SummaryRow:
    load = report.runs[0] if report is not None and report.runs else None
    return SummaryRow(
        name=record.name,
        error=record.error,
        requests=load.overall.requests if load else None,
        ok=load.overall.ok if load else None,
        errors=load.overall.errors if load else None,
        no_response=record.failures.no_response if record.failures else None,
        ttfvt={c: s.ttfvt_s for c, s in load.classes.items()} if load else {},
        goodput_rps=load.goodput_rps if load else None,
        output_tps=load.tps if load else None,
        ingress=record.cpu_load.get("ingress"),
        proxy=record.cpu_load.get("proxy"),
        idle_e2e_s=record.idle.e2e_median_s if record.idle else None,
        kv_peak={t.tier: t.kv_occupancy_max for t in load.tiers} if load else {},
    )


def fmt(value: float | int | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    return str(value) if isinstance(value, int) else f"{value:.{digits}f}"


def _ttfvt(row: SummaryRow, request_class: str) -> str:
    p = row.ttfvt.get(request_class)
    return f"{fmt(p.p50, 1)} / {fmt(p.p99, 1)}" if p is not None else "-"


def _cpu(stat: CpuStat | None) -> str:
    return f"{fmt(stat.mean, 0)} / {fmt(stat.max, 0)}" if stat is not None else "-"


def _kv(row: SummaryRow) -> str:
    return ", ".join(f"{tier} {fmt(peak)}" for tier, peak in row.kv_peak.items()) or "-"


def summary_line(row: SummaryRow) -> str:
    if row.requests is None:
        return f"SUMMARY {row.name}: no load report ({row.error or 'unknown'})"
    ttfvt = " ".join(f"{c} {_ttfvt(row, c)}" for c in REQUEST_CLASSES if c in row.ttfvt)
    return (
        f"SUMMARY {row.name}: requests {row.requests} ok {row.ok} errors {row.errors} (no response {fmt(row.no_response)}) | "
        f"TTFVT p50/p99 s {ttfvt} | goodput {fmt(row.goodput_rps)} req/s | output {fmt(row.output_tps, 0)} tok/s | "
        f"CPU % mean/max Ingress {_cpu(row.ingress)} proxy {_cpu(row.proxy)} | idle {IDLE_ANSWER_TOKENS}-token reply E2E "
        f"{fmt(row.idle_e2e_s)} s | KV peak {_kv(row)}" + (f" | error: {row.error}" if row.error else "")
    )


def markdown(rows: Sequence[SummaryRow]) -> str:
    head = ["config", "requests", "ok", "errors (no response)"]
    head += [f"{c} TTFVT p50 / p99 s" for c in REQUEST_CLASSES]
    head += ["goodput req/s", "output tok/s", "Ingress CPU % mean / max", "proxy CPU % mean / max",
             f"idle {IDLE_ANSWER_TOKENS}-token reply E2E median s (aim < {IDLE_AIM_S:g})", "KV peak per tier"]
    lines = ["# Full stack at the front door", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row.name, fmt(row.requests), fmt(row.ok), f"{fmt(row.errors)} ({fmt(row.no_response)})"]
        cells += [_ttfvt(row, c) for c in REQUEST_CLASSES]
        cells += [fmt(row.goodput_rps), fmt(row.output_tps, 0), _cpu(row.ingress), _cpu(row.proxy), fmt(row.idle_e2e_s),
                  _kv(row)]
        lines.append("| " + " | ".join(cells) + " |")
    lines += [
        "",
        "CPU: 100 = one core, all of a class's processes together, time-weighted mean and max of ~2 s samples over the "
        "arrival window (NAME-fullstack.json: also the whole load test, the busiest single process, and every class). "
        "Errors: every failed request but 429s; no response: none within --request-timeout, or no headers. "
        "TTFVT over successful requests; details in NAME-report.md.",
    ]
    errors = [f"- {row.name}: {row.error}" for row in rows if row.error]
    if errors:
        lines += ["", "Errors:", *errors]
    return "\n".join(lines) + "\n"


def saved_report(out_dir: Path, name: str) -> Report | None:
    path = out_dir / f"{name}-report.json"
    return Report.model_validate_json(path.read_text()) if path.exists() else None


def load_rows(out_dir: Path) -> list[SummaryRow]:
    """The summary rows of every NAME-fullstack.json in `out_dir`, in the order the policies started."""
    return [summary_row(r, saved_report(out_dir, r.name)) for r in saved_runs(out_dir)]


def write_summary(out_dir: Path) -> str:
    """Rebuild fullstack.md from the saved JSON in `out_dir`; returns its text."""
    text = markdown(load_rows(out_dir))
    (out_dir / "fullstack.md").write_text(text)
    return text
