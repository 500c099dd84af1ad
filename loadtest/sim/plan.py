"""`thinktier plan`: simulate a cluster under a policy and a workload, and report it as the load test reports a real
run (the same per-class statistics and goodput, from `thinktier.loadtest.report`), plus what only a simulation shows at fleet
scale: replicas per tier over time, GPU-hours and cost per 1,000 answers.

Also here: a sweep of one policy knob, the fewest replicas per tier that meet the SLOs, and a comparison with a
recorded run (the validation of the simulator against real ones).
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Unpack

from thinktier.loadtest.client import RequestResult
from thinktier.loadtest.metrics_scraper import MetricsTimeline, TierSample
from thinktier.loadtest.report import Report, RunReport, build_report
from thinktier.loadtest.runner import RunRecord
from thinktier.loadtest.sim.sim_cluster import SimHooks, SimResult, SimSettings, Simulation
from thinktier.loadtest.sim.sim_profile import HardwareProfile, profile_for
from thinktier.loadtest.sim.sim_replica import SimRequest
from thinktier.loadtest.sim.sim_workload import Lengths, WorkloadSpec, arrivals, classifier_scores
from thinktier.loadtest.workload import PromptPool
from thinktier.policies.loader import with_setting
from thinktier.policies.schema import Policy

UNFINISHED = "not finished within the simulated drain"


@dataclass(frozen=True)
class PlanInputs:
    policy: Policy
    workload: WorkloadSpec
    lengths: str = "budget"
    settings: SimSettings = field(default_factory=SimSettings)
    profiles: dict[str, Path] | None = None
    """Step profile per tier; by pool accelerator when absent."""
    overhead_s_per_seq: float | None = None
    """Replaces every profile's serving overhead (calibration tries values)."""


@dataclass(frozen=True)
class TierUse:
    tier: str
    replicas_min: int
    replicas_max: int
    replicas_mean: float
    replica_hours: float
    devices_per_replica: float
    device_hours: float
    kv_mean: float
    kv_peak: float
    stragglers_max: int
    preemptions: int


@dataclass(frozen=True)
class PlanResult:
    report: Report
    record: RunRecord
    """The simulated requests as the load test records real ones (what the report and its plots are built from)."""
    tiers: list[TierUse]
    answers: int
    wall_s: float
    sim: SimResult

    @property
    def run(self) -> RunReport:
        return self.report.runs[0]

    def preemptions_of(self, request_class: str) -> int:
        """Times the simulated engines preempted requests of `request_class` (chat included, as the router classed it)."""
        return sum(r.preemptions for r in self.sim.requests if r.request_class == request_class)

    def cost_per_1000_answers(self, device_hour_usd: float) -> float | None:
        hours = sum(t.device_hours for t in self.tiers)
        return hours * device_hour_usd / self.answers * 1000 if self.answers else None


def simulate(inputs: PlanInputs, pool: PromptPool | None = None, **hooks: Unpack[SimHooks]) -> PlanResult:
    """One simulation. `hooks` replace the simulation's decision functions (tests swap them)."""
    started = time.monotonic()
    policy = inputs.policy
    pool = pool or PromptPool.builtin(list(inputs.workload.languages) if inputs.workload.languages else None)
    work = arrivals(inputs.workload, pool)
    scores = classifier_scores(policy.routing.classifier.artifact, [a.prompt for a in work]) if (
        policy.routing.classifier.enabled
    ) else {}
    profiles = {
        name: profile_for(tier, (inputs.profiles or {}).get(name)) for name, tier in policy.tiers.items()
    }
    if inputs.overhead_s_per_seq is not None:
        profiles = {name: replace(p, overhead_s_per_seq=inputs.overhead_s_per_seq) for name, p in profiles.items()}
    simulation = Simulation(policy, profiles, inputs.settings, seed=inputs.workload.seed, **hooks)
    sim = simulation.run(work, scores, Lengths.parse(inputs.lengths, inputs.workload.seed))
    report, record = sim_report(sim, policy, inputs.workload)
    tiers = [tier_use(name, sim, policy, profiles[name]) for name in policy.tiers]
    answers = sum(r.end_s is not None and r.answer_tokens > 0 for r in sim.requests)
    return PlanResult(report, record, tiers, answers, time.monotonic() - started, sim)


def result_of(request: SimRequest) -> RequestResult:
    """A simulated request as the load test records a real one."""
    result = RequestResult(request.index, request.request_class, request.prompt_id, request.arrival_s)
    result.decision = {"tier": request.tier or "", "degraded": request.degraded or ""}
    if request.home:
        result.decision["borrowed"] = request.home
    if request.shed:
        result.status, result.error = 429, "HTTP 429: saturated"
        return result
    if request.end_s is None:
        result.error = UNFINISHED
        return result
    result.status = 200
    result.ttft_s = (request.first_token_s or request.end_s) - request.arrival_s
    result.ttfvt_s = request.first_answer_s - request.arrival_s if request.first_answer_s is not None else None
    result.e2e_s = request.end_s - request.arrival_s
    result.prompt_tokens = request.prompt_tokens
    result.completion_tokens = request.thinking_tokens + request.answer_tokens
    result.reasoning_tokens = request.thinking_tokens
    return result


def sim_report(sim: SimResult, policy: Policy, workload: WorkloadSpec) -> tuple[Report, RunRecord]:
    finished = [r.end_s for r in sim.requests if r.end_s is not None]
    duration = max([workload.duration_s, *finished])
    samples = [TierSample(p.t_s, p.tier, p.kv_mean, p.kv_max, p.replicas, float(p.stragglers)) for p in sim.timeline]
    record = RunRecord(
        f"rate={workload.rate:g}", "open", workload.rate, workload.shape, duration,
        [result_of(r) for r in sim.requests], MetricsTimeline(samples, len(samples)), workload.duration_s,
    )
    settings = {"mix": str(workload.mix), "seed": workload.seed, "mode": "open", "rates": [workload.rate],
                "shape": workload.shape, "duration_s": workload.duration_s, "model": "simulated"}
    return build_report("simulation", settings, policy.slos, [record]), record


def tier_use(name: str, sim: SimResult, policy: Policy, profile: HardwareProfile) -> TierUse:
    points = [p for p in sim.timeline if p.tier == name]
    tier = policy.tiers[name]
    devices = tier.engine.tensor_parallel_size * tier.pool.gpu_fraction if tier.pool.accelerator == "gpu" else 1.0
    hours = sim.replica_seconds[name] / 3600
    return TierUse(
        tier=name,
        replicas_min=min((p.replicas for p in points), default=0),
        replicas_max=max((p.replicas for p in points), default=0),
        replicas_mean=sum(p.replicas for p in points) / len(points) if points else 0.0,
        replica_hours=hours,
        devices_per_replica=devices,
        device_hours=hours * devices,
        kv_mean=sum(p.kv_mean for p in points) / len(points) if points else 0.0,
        kv_peak=max((p.kv_max for p in points), default=0.0),
        stragglers_max=max((p.stragglers for p in points), default=0),
        preemptions=max((p.preemptions_total for p in points), default=0),
    )


# ---- policy edits: sweeps and replica counts ---------------------------------------------------------------------


def sweep(inputs: PlanInputs, knob: str, values: Sequence[str]) -> list[tuple[str, PlanResult]]:
    return [(value, simulate(replace(inputs, policy=with_setting(inputs.policy, knob, value)))) for value in values]


def slo_attainment(result: PlanResult) -> float:
    return result.run.overall.slo_attainment or 0.0


def min_replicas_for_slo(inputs: PlanInputs, target: float) -> tuple[dict[str, int], PlanResult]:
    """Fixed replica counts (no autoscaling), found tier by tier: every tier at its max, then each tier in turn
    lowered by bisection to the fewest replicas that keep the SLO attainment at `target` or above."""
    policy = inputs.policy
    counts = {name: tier.replicas.max for name, tier in policy.tiers.items()}

    def attempt(trial: dict[str, int]) -> PlanResult:
        settings = replace(inputs.settings, autoscale=False, replicas=dict(trial))
        return simulate(replace(inputs, settings=settings))

    best = attempt(counts)
    if slo_attainment(best) < target:
        raise ValueError(f"even the policy's max replicas reach an SLO attainment of {slo_attainment(best):.3f} < {target}")
    for name in policy.tiers:
        low, high = 1, counts[name]
        while low < high:
            middle = (low + high) // 2
            trial = attempt({**counts, name: middle})
            if slo_attainment(trial) >= target:
                high, best = middle, trial
            else:
                low = middle + 1
        counts[name] = high
    return counts, attempt(counts)


def as_json(result: PlanResult, device_hour_usd: float) -> dict[str, Any]:
    return {
        "report": result.report.model_dump(mode="json"),
        "tiers": [asdict(t) for t in result.tiers],
        "answers": result.answers,
        "cost_per_1000_answers_usd": result.cost_per_1000_answers(device_hour_usd),
        "device_hour_usd": device_hour_usd,
        "simulated_s": result.sim.end_s,
        "wall_s": result.wall_s,
        "requests": len(result.sim.requests),
    }


def markdown(result: PlanResult, title: str, device_hour_usd: float) -> str:
    from thinktier.loadtest.report import markdown as report_markdown

    lines = [
        f"# thinktier plan: {title}",
        "",
        f"Simulated {result.sim.end_s:,.0f} s ({len(result.sim.requests):,} requests) in {result.wall_s:.1f} s of wall time.",
        "",
        "| tier | replicas min / mean / max | replica-hours | device-hours | KV mean / peak | stragglers max | preemptions |",
        "|---|---|---|---|---|---|---|",
    ]
    for t in result.tiers:
        lines.append(
            f"| {t.tier} | {t.replicas_min} / {t.replicas_mean:.1f} / {t.replicas_max} | {t.replica_hours:.2f} | "
            f"{t.device_hours:.2f} | {t.kv_mean:.2f} / {t.kv_peak:.2f} | {t.stragglers_max} | {t.preemptions} |"
        )
    cost = result.cost_per_1000_answers(device_hour_usd)
    lines += [
        "",
        f"Answers: {result.answers:,}; cost per 1,000 answers at ${device_hour_usd:g} per device-hour: "
        + (f"${cost:.3f}" if cost is not None else "-") + " (device: a GPU, or a CPU replica).",
        "",
    ]
    body = report_markdown(result.report)
    lines.append(body[body.index("## Summary"):] if "## Summary" in body else body)
    return "\n".join(lines) + "\n"


def write(result: PlanResult, out: Path, title: str, device_hour_usd: float, with_requests: bool = False) -> list[Path]:
    """plan.json, plan.md and the plots; with `with_requests` also the load test's own report.json, report.md and
    requests.jsonl (every simulated request), which `thinktier loadtest compare --summarize` reads."""
    from thinktier.loadtest import plots  # lazily: matplotlib is slow to import
    from thinktier.loadtest.report import write as write_load_test

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "plan.json", out / "plan.md", out / "plan_timeline.png", out / "plan_latency_cdf.png"]
    paths[0].write_text(json.dumps(as_json(result, device_hour_usd), indent=1) + "\n")
    paths[1].write_text(markdown(result, title, device_hour_usd))
    plots.plan_timeline(result.sim.timeline, paths[2])
    plots.latency_cdfs(result.record, paths[3])
    if with_requests:
        paths += write_load_test(result.report, [result.record], out)
    return paths


def calibrate_overhead(inputs: PlanInputs, real: Report, iterations: int = 12) -> tuple[float, PlanResult]:
    """The serving overhead per sequence and step at which the simulation's output tokens per second match a
    recorded full-stack run's (bisection; use a run whose engines were saturated, or throughput says nothing)."""
    target = real.runs[0].tps
    low, high = 0.0, 1e-3
    for _ in range(iterations):
        middle = (low + high) / 2
        if simulate(replace(inputs, overhead_s_per_seq=middle)).run.tps > target:
            low = middle
        else:
            high = middle
    overhead = (low + high) / 2
    return overhead, simulate(replace(inputs, overhead_s_per_seq=overhead))


def sweep_markdown(knob: str, rows: Sequence[tuple[str, PlanResult]], device_hour_usd: float) -> str:
    lines = [
        f"# thinktier plan: sweep of {knob}",
        "",
        "| value | goodput req/s | SLO attainment | easy TTFVT p99 s | medium TTFVT p99 s | hard E2E mean s | "
        "hard E2E p50 s | hard E2E p99 s | device-hours | cost per 1,000 answers | preemptions | of easy / medium / hard | "
        "borrowed | degraded | shed |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for value, result in rows:
        run = result.run
        easy, medium, hard = (run.classes.get(c) for c in ("easy", "medium", "hard"))
        cost = result.cost_per_1000_answers(device_hour_usd)
        cells = [
            value, f"{run.goodput_rps:.2f}", f"{slo_attainment(result):.3f}",
            _num(easy.ttfvt_s.p99 if easy else None), _num(medium.ttfvt_s.p99 if medium else None),
            _num(hard.e2e_s.mean if hard else None), _num(hard.e2e_s.p50 if hard else None),
            _num(hard.e2e_s.p99 if hard else None), f"{sum(t.device_hours for t in result.tiers):.2f}",
            "-" if cost is None else f"${cost:.3f}", str(sum(t.preemptions for t in result.tiers)),
            " / ".join(str(result.preemptions_of(c)) for c in ("easy", "medium", "hard")),
            str(run.overall.borrowed), str(run.overall.degraded), str(run.overall.shed),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
