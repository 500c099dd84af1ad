"""The configs of one fullstack folder side by side. Every config's report is rebuilt from its saved requests and
KV timeline with this version's report code (so a fix to the report reaches runs already made), then every metric of
`thinktier loadtest compare` is set as a ratio to a baseline config (compare.md, compare.json), and plotted: TTFVT p99
per class and config, and per config its latency CDFs and KV occupancy over time."""

from __future__ import annotations

import json
from pathlib import Path

from thinktier.loadtest.bench.fullstack.fullstack_record import saved_runs
from thinktier.loadtest.compare_report import markdown, side_by_side
from thinktier.loadtest.report import Report
from thinktier.loadtest.report import markdown as report_markdown
from thinktier.loadtest.report_rebuild import rebuild
from thinktier.loadtest.runner import RunRecord

FOOTER = (
    "Per config in this folder: NAME-report.md (every class and tier), NAME-latency.png (TTFVT and E2E CDFs per class), "
    "NAME-kv.png (KV occupancy per tier over time); ttfvt_p99_by_class.png sets the configs side by side."
)


def rebuilt(out_dir: Path, name: str) -> tuple[Report, list[RunRecord]] | None:
    """A config's report rebuilt from NAME-requests.jsonl and the timeline saved in NAME-report.json; None without both."""
    report, requests = out_dir / f"{name}-report.json", out_dir / f"{name}-requests.jsonl"
    if not report.exists() or not requests.exists():
        return None
    return rebuild(report, requests)


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
    (out_dir / "compare.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    text = markdown(result, FOOTER)
    (out_dir / "compare.md").write_text(text)
    plots.class_p99_bars(reports, out_dir / "ttfvt_p99_by_class.png")
    return text
