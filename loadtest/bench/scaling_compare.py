"""Autoscaling signals side by side, from the runs of one `thinktier bench fullstack` folder.

Per config: SLO misses, goodput and TTFVT p99 per class (from its rebuilt report), and for the scaled tier its
replica-seconds and every scale-up: when the tier came under pressure (KV occupancy, mean over its replicas, at or
above the policy's `target_kv_occupancy`), when a new replica's process appeared (the autoscaler asked for it and Ray
started it), and when it became routable (it reported to the load board, so /metrics lists it). Two replica counts:
routable (from the load test's /metrics scrapes) and held (started, routable or not: the tier's replica processes
counted by the driver's CPU sampler, less the other tiers' routable replicas), since a replica holds its GPU share from
its start. Written as autoscaling.{md,json,png} in the folder.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from pathlib import Path

from thinktier.loadtest.bench.fullstack.fullstack_compare import rebuilt
from thinktier.loadtest.bench.fullstack.fullstack_record import ConfigRun, saved_runs
from thinktier.loadtest.metrics_scraper import TierSample
from thinktier.loadtest.report import RunReport
from thinktier.policies.loader import parse_policy

TIER_PROCESSES = "tier"
"""The driver's CPU class of tier replica processes (every tier together)."""
CLASS_ORDER = ("easy", "medium", "hard", "chat")


@dataclass(frozen=True)
class TracePoint:
    t_s: float
    routable: int
    held: int | None
    kv_mean: float | None
    stragglers: float | None


@dataclass(frozen=True)
class ScaleUp:
    pressure_s: float | None
    """First time, since the previous scale-up, that the tier's mean KV occupancy reached the target."""
    asked_s: float | None
    """First sample with one more held replica (its process started)."""
    routable_s: float
    """First sample with one more routable replica."""

    @property
    def pressure_to_routable_s(self) -> float | None:
        return None if self.pressure_s is None else self.routable_s - self.pressure_s


@dataclass
class SignalResult:
    name: str
    signal: str
    requests: int
    slo_misses: int
    degraded: int
    """Served with a shrunken budget or on the chat tier: what a saturated tier trades for its latency."""
    goodput_rps: float
    ttfvt_p99_s: dict[str, float | None]
    routable_replica_s: float
    held_replica_s: float | None
    max_routable: int
    max_held: int | None
    scale_ups: list[ScaleUp]
    trace: list[TracePoint] = field(repr=False)


def held_replicas(run: ConfigRun, timeline: list[TierSample], tier: str) -> list[tuple[float, int]]:
    """(t_s, replicas of `tier` started) from the driver's samples: tier processes less the other tiers' routable
    replicas at the nearest scrape."""
    others = [s for s in timeline if s.tier != tier]
    held = []
    for sample in run.timeline:
        cpu = sample.cpu.get(TIER_PROCESSES)
        if cpu is None:
            continue
        nearest: dict[str, int] = {}
        for s in sorted(others, key=lambda s: abs(s.t_s - sample.t_s)):
            nearest.setdefault(s.tier, s.replicas)
        held.append((sample.t_s, cpu.processes - sum(nearest.values())))
    return held


def trace(run: ConfigRun, report: RunReport, tier: str) -> list[TracePoint]:
    mine = [s for s in report.timeline if s.tier == tier]
    held = held_replicas(run, list(report.timeline), tier)

    def held_at(t: float) -> int | None:
        before = [n for ht, n in held if ht <= t + 1.0]
        return before[-1] if before else None

    return [TracePoint(s.t_s, s.replicas, held_at(s.t_s), s.kv_occupancy_mean, s.stragglers) for s in mine]


def scale_ups(points: list[TracePoint], target_kv: float) -> list[ScaleUp]:
    ups = []
    pressure: float | None = None
    asked: float | None = None
    for prev, point in pairwise(points):
        if pressure is None and point.kv_mean is not None and point.kv_mean >= target_kv:
            pressure = point.t_s
        if asked is None and point.held is not None and prev.held is not None and point.held > prev.held:
            asked = point.t_s
        if point.routable > prev.routable:
            ups.append(ScaleUp(pressure, asked, point.t_s))
            pressure = asked = None
    return ups


def replica_seconds(points: list[tuple[float, int]]) -> float:
    """Integral of a step function of replica counts."""
    return sum((t1 - t0) * n for (t0, n), (t1, _) in pairwise(points))


def compare(out_dir: Path, tier: str) -> list[SignalResult]:
    results = []
    for run in saved_runs(out_dir):
        found = rebuilt(out_dir, run.name)
        if found is None or run.policy_yaml is None:
            continue
        report = found[0].runs[0]
        autoscaling = parse_policy(run.policy_yaml, run.policy).tiers[tier].autoscaling
        points = trace(run, report, tier)
        held = [(p.t_s, p.held) for p in points if p.held is not None]
        overall = report.overall
        results.append(SignalResult(
            name=run.name,
            signal=autoscaling.signal,
            requests=overall.requests,
            slo_misses=overall.requests - overall.slo_met,
            degraded=overall.degraded,
            goodput_rps=report.goodput_rps,
            ttfvt_p99_s={c: s.ttfvt_s.p99 for c, s in report.classes.items()},
            routable_replica_s=replica_seconds([(p.t_s, p.routable) for p in points]),
            held_replica_s=replica_seconds(held) if held else None,
            max_routable=max((p.routable for p in points), default=0),
            max_held=max((n for _, n in held), default=None),
            scale_ups=scale_ups(points, autoscaling.target_kv_occupancy),
            trace=points,
        ))
    return results


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown(results: list[SignalResult], tier: str, baseline: str) -> str:
    seen = {c for r in results for c in r.ttfvt_p99_s}
    classes = [c for c in CLASS_ORDER if c in seen] + sorted(seen - set(CLASS_ORDER))
    lines = [
        f"# Autoscaling of the {tier} tier: signal against signal",
        "",
        "| config | signal | requests | SLO misses | degraded | goodput req/s | "
        + " | ".join(f"{c} TTFVT p99 s" for c in classes)
        + " | replica-s routable | replica-s held | max replicas routable / held | pressure -> routable s |",
        "|---|---|---|---|---|---|" + "---|" * len(classes) + "---|---|---|---|",
    ]
    for r in results:
        waits = ", ".join(_f(u.pressure_to_routable_s) for u in r.scale_ups) or "-"
        lines.append(
            f"| {r.name} | {r.signal} | {r.requests} | {r.slo_misses} | {r.degraded} | {r.goodput_rps:.2f} | "
            + " | ".join(_f(r.ttfvt_p99_s.get(c)) for c in classes)
            + f" | {r.routable_replica_s:.0f} | {_f(r.held_replica_s, 0)} | {r.max_routable} / {r.max_held or '-'} | {waits} |"
        )
    base = next((r for r in results if r.name == baseline), None)
    if base is not None:
        for r in results:
            if r is base:
                continue
            lines += ["", f"{r.name} vs {base.name}: SLO misses {r.slo_misses} vs {base.slo_misses}, goodput x"
                      f"{r.goodput_rps / base.goodput_rps:.3f}, routable replica-seconds x"
                      f"{r.routable_replica_s / base.routable_replica_s:.3f}"
                      + (f", held x{r.held_replica_s / base.held_replica_s:.3f}"
                         if r.held_replica_s and base.held_replica_s else "") + "."]
    lines += [
        "",
        "Scale-ups (seconds since the load test started): pressure = mean KV occupancy first at the policy's "
        "target_kv_occupancy; asked = a new replica process appeared; routable = it reported to the load board.",
        "",
        "| config | pressure s | asked s | routable s |",
        "|---|---|---|---|",
    ]
    for r in results:
        for u in r.scale_ups:
            lines.append(f"| {r.name} | {_f(u.pressure_s)} | {_f(u.asked_s)} | {u.routable_s:.1f} |")
    lines += ["", "![replicas, KV occupancy and stragglers over time](autoscaling.png)", ""]
    return "\n".join(lines)


def write(out_dir: Path, tier: str, baseline: str) -> str:
    results = compare(out_dir, tier)
    if not results:
        raise ValueError(f"no run in {out_dir} has both its report and its policy text (NAME-fullstack.json policy_yaml)")
    (out_dir / "autoscaling.json").write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")
    from thinktier.loadtest import plots  # lazily: matplotlib is slow to import

    plots.autoscaling_traces({r.name: r.trace for r in results}, tier, out_dir / "autoscaling.png")
    text = markdown(results, tier, baseline)
    (out_dir / "autoscaling.md").write_text(text)
    return text
