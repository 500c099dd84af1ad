"""The configs of one fullstack folder side by side. Every config's report is rebuilt from its saved requests and
KV timeline with this version's report code (so a fix to the report reaches runs already made), then every metric of
`thinktier loadtest compare` is set as a ratio to a baseline config (compare.md, compare.json), and plotted: TTFVT p99
per class and config, and per config its latency CDFs and KV occupancy over time."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from thinktier.loadtest.bench.fullstack.fullstack_record import read_jsonl, saved_runs
from thinktier.loadtest.bench.fullstack.fullstack_report import saved_report
from thinktier.loadtest.client import RequestResult
from thinktier.loadtest.compare import markdown, side_by_side
from thinktier.loadtest.metrics_scraper import MetricsTimeline
from thinktier.loadtest.report import Report, RunReport, build_report
from thinktier.loadtest.report import markdown as report_markdown
from thinktier.loadtest.runner import RunRecord

FOOTER = (
    "Per config in this folder: NAME-report.md (every class and tier), NAME-latency.png (TTFVT and E2E CDFs per class), "
    "NAME-kv.png (KV occupancy per tier over time); ttfvt_p99_by_class.png sets the configs side by side."
)


def arrival_window(run: RunReport, settings: dict[str, Any]) -> float | None:
    """The arrival window of a saved run: its own, or for reports saved before it was recorded, the open loop's
    planned duration from the run's settings."""
    if run.window_s is not None or run.mode != "open":
        return run.window_s
    planned = settings.get("duration_s")
    return float(planned) if planned is not None else None


def rebuilt(out_dir: Path, name: str) -> tuple[Report, list[RunRecord]] | None:
    """A config's report rebuilt from NAME-requests.jsonl and the timeline saved in NAME-report.json; None without both."""
    saved, requests = saved_report(out_dir, name), out_dir / f"{name}-requests.jsonl"
    if saved is None or not requests.exists():
        return None
    rows = read_jsonl(requests)
    records = [
        RunRecord(
            run.label, run.mode, run.offered_rate_rps, run.shape, run.duration_s,
            [RequestResult.from_row(row) for row in rows if row["run"] == run.label],
            MetricsTimeline(list(run.timeline), run.scrapes, run.scrape_failures, run.scrape_last_error),
            arrival_window(run, saved.settings),
        )
        for run in saved.runs
    ]
    return build_report(saved.target, saved.settings, saved.slos, records), records


def write_comparison(out_dir: Path, baseline: str) -> str:
    """Rewrite every NAME-report.{json,md} from its requests, then write compare.md, compare.json and the plots;
    returns compare.md's text."""
    from thinktier.loadtest import plots  # lazily: matplotlib is slow to import

    reports: dict[str, Report] = {}
    for run in saved_runs(out_dir):
        if (found := rebuilt(out_dir, run.name)) is None:
            continue
        report, records = found
        reports[run.name] = report
        (out_dir / f"{run.name}-report.json").write_text(report.model_dump_json(indent=2))
        (out_dir / f"{run.name}-report.md").write_text(report_markdown(report))
        plots.latency_cdfs(records[0], out_dir / f"{run.name}-latency.png")
        plots.kv_timeline(report.runs[0], out_dir / f"{run.name}-kv.png")
    if baseline not in reports:
        raise ValueError(
            f"baseline {baseline!r} has no saved report and requests in {out_dir}; configs with both: {list(reports)}"
        )
    first = reports[baseline]
    result = side_by_side(reports, baseline, {**first.settings, "configs": ", ".join(reports)})
    (out_dir / "compare.json").write_text(json.dumps(result.model_dump(mode="json", exclude={"reports"}), indent=2) + "\n")
    text = markdown(result, FOOTER)
    (out_dir / "compare.md").write_text(text)
    plots.class_p99_bars(reports, out_dir / "ttfvt_p99_by_class.png")
    return text
