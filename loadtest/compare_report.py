"""The side-by-side report of `thinktier loadtest compare`: every metric of every target as a ratio to a baseline
target, taken within a seed (same prompts, same arrival times); where a rate ran under several seeds, the median and
range of each value and ratio over them. `summarize` rebuilds it all from a compare folder's raw files."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from thinktier.loadtest.compare_targets import LINEUP
from thinktier.loadtest.report import ClassStats, Report, RunReport
from thinktier.loadtest.report_rebuild import rebuild, saved_jsonl

TARGET_FILE = "target.json"
"""In each target's folder: what the target was ({kind, policy, what})."""
SEED_DIR = "seed-"


@dataclass(frozen=True)
class Metric:
    name: str
    value: Callable[[RunReport], float | None]
    higher_is_better: bool


def _of_class(cls: str, stat: Callable[[ClassStats], float | None]) -> Callable[[RunReport], float | None]:
    """`stat` of one request class of a run; None when the run had none of it."""
    return lambda r: stat(r.classes[cls]) if cls in r.classes else None


METRICS: tuple[Metric, ...] = (
    Metric("goodput req/s", lambda r: r.goodput_rps, True),
    Metric("undegraded goodput req/s", lambda r: r.undegraded_goodput_rps, True),
    Metric("correct goodput req/s", lambda r: r.correct_goodput_rps, True),
    Metric("accuracy", lambda r: r.overall.accuracy, True),
    Metric("SLO attainment", lambda r: r.overall.slo_attainment, True),
    Metric("TPS (tokens/s)", lambda r: r.tps, True),
    Metric("answer TPS", lambda r: r.answer_tps, True),
    Metric("TTFVT p50 s", lambda r: r.overall.ttfvt_s.p50, False),
    Metric("TTFVT p99 s", lambda r: r.overall.ttfvt_s.p99, False),
    Metric("E2E p50 s", lambda r: r.overall.e2e_s.p50, False),
    Metric("E2E p99 s", lambda r: r.overall.e2e_s.p99, False),
    *(
        Metric(f"{cls} TTFVT p99 s", _of_class(cls, lambda c: c.ttfvt_s.p99), False)
        for cls in ("easy", "medium", "hard", "chat")
    ),
    Metric("hard TTFVT p50 s", _of_class("hard", lambda c: c.ttfvt_s.p50), False),
    *(
        Metric(f"{cls} goodput req/s", _of_class(cls, lambda c: c.goodput_rps), True)
        for cls in ("easy", "medium", "hard", "chat")
    ),
    Metric("thinking tokens/req", lambda r: r.overall.thinking_tokens_mean, False),
    Metric("degraded", lambda r: float(r.overall.degraded), False),
    Metric("borrowed", lambda r: float(r.overall.borrowed), False),
    Metric("no answer", lambda r: float(r.overall.no_answer), False),
    Metric("shed (429)", lambda r: float(r.overall.shed), False),
    Metric("errors", lambda r: float(r.overall.errors), False),
)


class Row(BaseModel):
    run: str
    metric: str
    higher_is_better: bool
    values: dict[str, float | None]
    ratios: dict[str, float | None]
    """value / baseline's value, in the same run."""


class Range(BaseModel):
    median: float
    low: float
    high: float
    n: int


class Spread(BaseModel):
    """One metric of one run label (a rate) over the seeds it ran under."""

    run: str
    metric: str
    higher_is_better: bool
    seeds: list[int]
    values: dict[str, Range | None]
    ratios: dict[str, Range | None]


class CompareReport(BaseModel):
    baseline: str
    targets: list[str]
    settings: dict[str, object]
    spread: list[Spread] = []
    rows: list[Row]


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return value / base


def _rows(reports: Mapping[str, Report], targets: list[str], baseline: str, prefix: str = "") -> list[Row]:
    """A row per run of the baseline and metric, with a value per target; a target without that run (by label, or
    without a report at all) has none there."""
    rows = []
    for base_run in reports[baseline].runs:
        runs = {name: next((r for r in reports[name].runs if r.label == base_run.label), None) if name in reports else None
                for name in targets}
        for metric in METRICS:
            values = {name: None if run is None else metric.value(run) for name, run in runs.items()}
            ratios = {name: ratio(v, values[baseline]) for name, v in values.items()}
            rows.append(Row(run=prefix + base_run.label, metric=metric.name, higher_is_better=metric.higher_is_better,
                            values=values, ratios=ratios))
    return rows


def side_by_side(reports: dict[str, Report], baseline: str, settings: dict[str, object]) -> CompareReport:
    """One seed's reports side by side."""
    if baseline not in reports:
        raise ValueError(f"baseline {baseline!r} is not one of the targets {list(reports)}")
    return CompareReport(baseline=baseline, targets=list(reports), settings=settings,
                         rows=_rows(reports, list(reports), baseline))


def _range(values: list[float]) -> Range | None:
    if not values:
        return None
    return Range(median=statistics.median(values), low=min(values), high=max(values), n=len(values))


def matrix(by_seed: Mapping[int, Mapping[str, Report]], targets: list[str], baseline: str,
           settings: dict[str, object]) -> CompareReport:
    """Every seed's reports side by side (rows labelled "seed=S rate=R"), and for each rate run under more than one
    seed, the median and range over the seeds of each target's values and ratios."""
    rows: list[Row] = []
    seeds_of: dict[str, list[int]] = {}
    for seed, reports in sorted(by_seed.items()):
        if baseline not in reports:
            raise ValueError(f"the baseline {baseline!r} has no run of seed {seed}; it has to run every seed")
        rows += _rows(reports, targets, baseline, f"seed={seed} ")
        for run in reports[baseline].runs:
            seeds_of.setdefault(run.label, []).append(seed)
    spread = []
    for label, seeds in seeds_of.items():
        if len(seeds) < 2:
            continue
        for metric in METRICS:
            mine = [r for r in rows if r.metric == metric.name and r.run in {f"seed={s} {label}" for s in seeds}]
            spread.append(Spread(
                run=label, metric=metric.name, higher_is_better=metric.higher_is_better, seeds=seeds,
                values={t: _range([v for r in mine if (v := r.values[t]) is not None]) for t in targets},
                ratios={t: _range([v for r in mine if (v := r.ratios[t]) is not None]) for t in targets},
            ))
    return CompareReport(baseline=baseline, targets=targets, settings=settings, spread=spread, rows=rows)


FOOTER = (
    "Per target, per seed (TARGET/seed-S/): report.md, requests.jsonl or requests.jsonl.gz (the raw requests every "
    "figure here is rebuilt from) and plots; goodput_vs_load.png plots every target over every seed's rates (median "
    "and range). "
    "Rebuild this page with "
    "`thinktier loadtest compare --summarize DIR --baseline NAME`."
)


def _cell(value: float | None, ratio_: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" + (f" ({ratio_:.2f}x)" if ratio_ is not None else "")


def _spread_cell(values: Range | None, ratios: Range | None) -> str:
    if values is None:
        return "-"
    text = f"{values.median:.3g} [{values.low:.3g}, {values.high:.3g}]"
    if ratios is not None:
        text += f" ({ratios.median:.2f}x [{ratios.low:.2f}, {ratios.high:.2f}])"
    return text


def markdown(report: CompareReport, footer: str = FOOTER) -> str:
    names = report.targets
    header = ["| metric | better | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    lines = [
        "# thinktier loadtest compare",
        "",
        "Settings: " + "; ".join(f"{k}: {v}" for k, v in report.settings.items()),
        "",
        f"Each cell: value (ratio to {report.baseline} in the same run). Same machine, model, workload and seed for "
        "every target.",
    ]
    for run in dict.fromkeys(s.run for s in report.spread):
        seeds = next(s.seeds for s in report.spread if s.run == run)
        lines += ["", f"## {run}, over seeds {', '.join(map(str, seeds))}", "",
                  "Each cell: median [lowest, highest] of the value (and of its ratio to the baseline, taken within each "
                  "seed).", "", *header]
        for s in (s for s in report.spread if s.run == run):
            cells = [_spread_cell(s.values[n], s.ratios[n]) for n in names]
            lines.append(f"| {s.metric} | {'higher' if s.higher_is_better else 'lower'} | " + " | ".join(cells) + " |")
    for run in dict.fromkeys(row.run for row in report.rows):
        lines += ["", f"## {run}", "", *header]
        for row in (r for r in report.rows if r.run == run):
            cells = [_cell(row.values[n], row.ratios[n]) for n in names]
            lines.append(f"| {row.metric} | {'higher' if row.higher_is_better else 'lower'} | " + " | ".join(cells) + " |")
    lines += ["", footer]
    return "\n".join(lines) + "\n"


def saved_targets(out_dir: Path) -> dict[str, dict[str, str]]:
    """The target folders of a compare folder (those with a seed run), in the line-up's order, each with its
    description where it saved one."""
    found = [d for d in out_dir.iterdir() if d.is_dir() and any(d.glob(f"{SEED_DIR}*/report.json"))]
    order = {name: i for i, name in enumerate(LINEUP)}
    found.sort(key=lambda d: (order.get(d.name, len(order)), d.name))
    return {d.name: json.loads((d / TARGET_FILE).read_text()) if (d / TARGET_FILE).exists() else {} for d in found}


def load_matrix(out_dir: Path, targets: Iterable[str]) -> dict[int, dict[str, Report]]:
    """Every target's report per seed, rebuilt from its raw requests with this version's report code."""
    by_seed: dict[int, dict[str, Report]] = {}
    for name in targets:
        for run_dir in sorted((out_dir / name).glob(f"{SEED_DIR}*")):
            report, requests = run_dir / "report.json", run_dir / "requests.jsonl"
            if report.exists() and saved_jsonl(requests) is not None:
                by_seed.setdefault(int(run_dir.name.removeprefix(SEED_DIR)), {})[name] = rebuild(report, requests)[0]
    return by_seed


def summarize(out_dir: Path, baseline: str) -> CompareReport:
    """compare.json, compare.md and goodput_vs_load.png of a compare folder, from its raw files."""
    targets = saved_targets(out_dir)
    by_seed = load_matrix(out_dir, targets)
    if not by_seed:
        raise ValueError(f"{out_dir}: no TARGET/{SEED_DIR}S/report.json with requests.jsonl beside it")
    first = by_seed[min(by_seed)]
    settings = {k: v for k, v in next(iter(first.values())).settings.items() if k in ("mix", "prompts", "mode", "rates",
                                                                                       "shape", "duration_s", "batch_size")}
    settings["seeds"] = ",".join(str(s) for s in sorted(by_seed))
    settings.update({name: f"{t['what']} ({t['policy']})" for name, t in targets.items() if t})
    present = [t for t in targets if any(t in reports for reports in by_seed.values())]
    result = matrix(by_seed, present, baseline, settings)
    (out_dir / "compare.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    (out_dir / "compare.md").write_text(markdown(result))
    if first[baseline].runs and first[baseline].runs[0].mode == "open":
        from thinktier.loadtest.plots import compare_goodput  # lazily: matplotlib is slow to import

        compare_goodput({t: [reports[t] for reports in by_seed.values() if t in reports] for t in present},
                        out_dir / "goodput_vs_load.png")
    return result
