"""A saved load test's report rebuilt with this version's report code from its raw requests (requests.jsonl) and the
KV timeline saved in its report.json, so a fix to a metric reaches runs already made, and committed figures can be
recomputed from the committed raw files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from thinktier.loadtest.client import RequestResult
from thinktier.loadtest.metrics_scraper import MetricsTimeline
from thinktier.loadtest.report import Report, RunReport, build_report
from thinktier.loadtest.runner import RunRecord


def saved_jsonl(path: Path) -> Path | None:
    """`path`, or the gzip copy beside it (`path`.gz: committed results keep their raw requests compressed, a tenth of
    the bytes); None when neither exists."""
    packed = path.with_name(path.name + ".gz")
    return path if path.exists() else packed if packed.exists() else None


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file, or of its gzip copy (`saved_jsonl`)."""
    found = saved_jsonl(path)
    if found is None:
        raise FileNotFoundError(f"{path}: no such file, nor {path.name}.gz beside it")
    text = gzip.decompress(found.read_bytes()).decode() if found.suffix == ".gz" else found.read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def arrival_window(run: RunReport, settings: dict[str, Any]) -> float | None:
    """The arrival window of a saved run: its own, or for reports saved before it was recorded, the open loop's
    planned duration from the run's settings."""
    if run.window_s is not None or run.mode != "open":
        return run.window_s
    planned = settings.get("duration_s")
    return float(planned) if planned is not None else None


def rebuild(report_path: Path, requests_path: Path) -> tuple[Report, list[RunRecord]]:
    """The report at `report_path` computed again from the requests at `requests_path`."""
    saved = Report.model_validate_json(report_path.read_text())
    rows = read_jsonl(requests_path)
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
