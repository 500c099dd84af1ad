"""`thinktier loadtest compare`: one workload against several targets that the tool starts itself, one after
the other on the same machine, and a side-by-side report with each metric as a ratio to a baseline target.

The standard line-up: thinktier with the tiered policy, thinktier with a single-pool policy (one tier, no
classifier, no budgets), and Ray Serve LLM's OpenAI app on the same vLLM engine settings.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from thinktier.loadtest.client import RequestOptions
from thinktier.loadtest.measure import LoadSpec, measure
from thinktier.loadtest.metrics_scraper import RAY_LLM_METRICS
from thinktier.loadtest.ray_llm_target import RayLLMApp, settings_from_tier
from thinktier.loadtest.report import ClassStats, Report, RunReport
from thinktier.loadtest.runner import RunSettings, Target
from thinktier.loadtest.workload import PromptPool
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import SLO, DifficultyClass

TargetKind = Literal["thinktier", "ray-serve-llm"]


@dataclass(frozen=True)
class CompareTarget:
    """A server the compare starts: thinktier on a policy file, or Ray Serve LLM on a tier of a policy file."""

    name: str
    kind: TargetKind
    policy_path: str
    tier: str | None = None
    """Ray Serve LLM only: the tier whose model and engine settings it copies (the routing's reasoning tier when None)."""
    cpu_threads: str | None = None
    """Ray Serve LLM on CPU only: the cores its engine binds to."""


@contextmanager
def started(target: CompareTarget, port: int, metrics_port: int, options: RequestOptions) -> Iterator[Target]:
    """Start `target`, yield where to send the load, and stop it afterwards."""
    if target.kind == "thinktier":
        from thinktier.cluster.local import LocalCluster  # lazily: starting thinktier pulls in Ray Serve and vLLM

        with LocalCluster(target.policy_path, port) as cluster:
            yield Target(cluster.url, options=options)
        return
    policy = load_policy(target.policy_path)
    tier = policy.tiers[target.tier or policy.routing.reasoning_tier]
    settings = settings_from_tier(tier, cpu_threads=target.cpu_threads)
    # Without thinking budgets a reasoning model may think until max_model_len; stop it where thinktier's largest budget would.
    max_tokens = options.max_tokens or max(b.thinking_tokens + b.answer_tokens for b in tier.budgets.values())
    peer = replace(options, model=settings.model_id, max_tokens=max_tokens)
    with RayLLMApp(settings, port, metrics_port) as app:
        yield Target(app.url, options=peer, metrics_url=app.metrics_url, metric_names=RAY_LLM_METRICS)


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
    *(
        Metric(f"{cls} goodput req/s", _of_class(cls, lambda c: c.goodput_rps), True)
        for cls in ("easy", "medium", "hard", "chat")
    ),
    Metric("thinking tokens/req", lambda r: r.overall.thinking_tokens_mean, False),
    Metric("degraded", lambda r: float(r.overall.degraded), False),
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
    """value / baseline's value."""


class CompareReport(BaseModel):
    baseline: str
    targets: list[str]
    settings: dict[str, object]
    rows: list[Row]
    reports: dict[str, Report]


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or base is None or base == 0:
        return None
    return value / base


def side_by_side(reports: dict[str, Report], baseline: str, settings: dict[str, object]) -> CompareReport:
    if baseline not in reports:
        raise ValueError(f"baseline {baseline!r} is not one of the targets {list(reports)}")
    rows = []
    for index, base_run in enumerate(reports[baseline].runs):
        runs = {name: report.runs[index] for name, report in reports.items()}
        for metric in METRICS:
            values = {name: metric.value(run) for name, run in runs.items()}
            ratios = {name: ratio(v, values[baseline]) for name, v in values.items()}
            rows.append(
                Row(
                    run=base_run.label, metric=metric.name, higher_is_better=metric.higher_is_better, values=values, ratios=ratios
                )
            )
    return CompareReport(baseline=baseline, targets=list(reports), settings=settings, rows=rows, reports=reports)


FOOTER = (
    "goodput_vs_load.png plots every target (open loop); full reports, requests and plots per target are in the "
    "sub-folders named after the targets."
)


def markdown(report: CompareReport, footer: str = FOOTER) -> str:
    names = report.targets
    lines = [
        "# thinktier loadtest compare",
        "",
        "Settings: " + "; ".join(f"{k}: {v}" for k, v in report.settings.items()),
        "",
        f"Each cell: value (ratio to {report.baseline}). Same machine, model, workload and seed for every target.",
    ]
    for run in dict.fromkeys(row.run for row in report.rows):
        lines += ["", f"## {run}", "", "| metric | better | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
        for row in (r for r in report.rows if r.run == run):
            cells = [
                "-"
                if row.values[n] is None
                else f"{row.values[n]:.3g}" + (f" ({row.ratios[n]:.2f}x)" if row.ratios[n] is not None else "")
                for n in names
            ]
            lines.append(f"| {row.metric} | {'higher' if row.higher_is_better else 'lower'} | " + " | ".join(cells) + " |")
    lines += ["", footer]
    return "\n".join(lines) + "\n"


def compare(
    targets: Sequence[CompareTarget],
    spec: LoadSpec,
    pool: PromptPool,
    slos: dict[DifficultyClass, SLO],
    out_dir: Path,
    baseline: str,
    options: RequestOptions,
    port: int = 8000,
    metrics_port: int = 8090,
    settings: RunSettings | None = None,
) -> CompareReport:
    """Start each target in turn, run the same workload against it, stop it; then write compare.json/.md."""
    names = [t.name for t in targets]
    if len(set(names)) != len(names) or baseline not in names:
        raise ValueError(f"target names must be unique and include the baseline {baseline!r}; got {names}")
    reports: dict[str, Report] = {}
    for target in targets:
        with started(target, port, metrics_port, options) as endpoint:
            reports[target.name], _ = measure(endpoint, spec, pool, slos, out_dir / target.name, settings)
    policies = {f"{t.name} policy": t.policy_path + (f" (tier {t.tier})" if t.tier else "") for t in targets}
    result = side_by_side(reports, baseline, {**spec.settings(), **policies})
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "compare.json").write_text(json.dumps(result.model_dump(mode="json", exclude={"reports"}), indent=2))
    (out_dir / "compare.md").write_text(markdown(result))
    if spec.batch_size is None:
        from thinktier.loadtest.plots import compare_goodput  # lazily: matplotlib is slow to import

        compare_goodput(reports, out_dir / "goodput_vs_load.png")
    return result
