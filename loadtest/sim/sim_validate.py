"""The simulator against real runs: each case replays a recorded workload through the simulation and sets its
per-class goodput and p50/p99 TTFVT beside the measured ones, with the relative error of each.

Two kinds of case: a full-stack load test (`thinktier loadtest run` or `bench fullstack`: its report.json names the
seeded workload, the policy file is given), replayed through the whole simulated cluster; and a bare-engine run of
`thinktier bench gpu` (one TierEngine, a workload file with each request's budget and priority), replayed through one
simulated replica.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from thinktier.loadtest.bench.fullstack.fullstack_compare import rebuilt
from thinktier.loadtest.bench.gpu.gpu_configs import CONFIGS
from thinktier.loadtest.bench.gpu.gpu_workload import Workload
from thinktier.loadtest.report import Report
from thinktier.loadtest.sim.engine_replay import EngineReplay, replay_engine
from thinktier.loadtest.sim.plan import PlanInputs, simulate
from thinktier.loadtest.sim.sim_cluster import SimSettings
from thinktier.loadtest.sim.sim_profile import gpu_tier_profiles, profile_for
from thinktier.loadtest.sim.sim_workload import WorkloadSpec
from thinktier.policies.loader import load_policy

CLASSES = ("easy", "medium", "hard", "chat")


@dataclass(frozen=True)
class Figure:
    name: str
    real: float | None
    sim: float | None

    @property
    def error(self) -> float | None:
        """(sim - real) / real."""
        if self.real is None or self.sim is None or self.real == 0:
            return None
        return (self.sim - self.real) / self.real


@dataclass(frozen=True)
class Case:
    name: str
    kind: str
    figures: list[Figure]


def _class_figures(cls: str, real: dict[str, Any], sim: dict[str, Any]) -> list[Figure]:
    return [
        Figure(f"{cls} goodput req/s", real.get("goodput"), sim.get("goodput")),
        Figure(f"{cls} TTFVT p50 s", real.get("p50"), sim.get("p50")),
        Figure(f"{cls} TTFVT p99 s", real.get("p99"), sim.get("p99")),
    ]


def _report_classes(report: Report) -> dict[str, dict[str, Any]]:
    run = report.runs[0]
    return {c: {"goodput": s.goodput_rps, "p50": s.ttfvt_s.p50, "p99": s.ttfvt_s.p99} for c, s in run.classes.items()}


def recorded_report(report_path: Path) -> Report:
    """A recorded full-stack run's report (NAME-report.json) as this version's report code computes it from the
    requests saved beside it, so the simulator is held to today's metric definitions; as saved where no requests were
    kept."""
    found = rebuilt(report_path.parent, report_path.name.removesuffix("-report.json"))
    return found[0] if found else Report.model_validate_json(report_path.read_text())


def fullstack_case(
    name: str, report_path: Path, policy_path: Path, lengths: str = "budget", settings: SimSettings | None = None,
    profile_path: Path | None = None, overhead_s_per_seq: float | None = None, lending: bool = False,
) -> Case:
    """A recorded load test against thinktier, replayed through the simulated cluster, its GPU tiers on `profile_path`
    (the pool accelerator's default when None) with this serving overhead (the profile's when None). The policy is
    replayed without its lending rules unless `lending` (runs made before tiers lent capacity ran without them)."""
    real = recorded_report(report_path)
    policy = load_policy(policy_path)
    if not lending:
        policy = policy.model_copy(update={"lending": []})
    inputs = PlanInputs(policy, WorkloadSpec.from_report(report_path), lengths, settings or SimSettings(),
                        gpu_tier_profiles(policy.tiers, profile_path), overhead_s_per_seq)
    result = simulate(inputs)
    real_classes, sim_classes = _report_classes(real), _report_classes(result.report)
    figures = [Figure("goodput req/s", real.runs[0].goodput_rps, result.run.goodput_rps),
               Figure("output tok/s", real.runs[0].tps, result.run.tps)]
    for cls in CLASSES:
        if cls in real_classes:
            figures += _class_figures(cls, real_classes[cls], sim_classes.get(cls, {}))
    return Case(name, "full stack", figures)


@dataclass(frozen=True)
class EngineRun:
    """One configuration and workload of a recorded `thinktier bench gpu run`, with the policy it ran."""

    run_path: Path
    config: str
    workload_path: Path
    policy_path: Path
    step: str | None = None
    """The workload's name in the run (`--workload NAME=PATH`); the name inside the workload file when None."""
    profile_path: Path | None = None
    """The step profile of the card it ran on; the pool accelerator's default when None."""

    @cached_property
    def recorded(self) -> tuple[dict[str, Any], Workload, int, float]:
        """The run's own figures for this workload, the workload, the engine's KV tokens and the run's drain."""
        run = json.loads(self.run_path.read_text())
        workload = Workload.from_json(json.loads(self.workload_path.read_text()))
        name = self.step or workload.name
        result = next(r for r in run["results"] if r["config"] == self.config and name in r["workloads"])
        return result["workloads"][name], workload, result["kv_capacity_tokens"], run["drain_s"]

    def replay(self, overhead_s_per_seq: float | None = None) -> EngineReplay:
        """The simulator on the run's requests (with this serving overhead per sequence and step in place of the
        profile's, where given)."""
        _, workload, kv_tokens, drain_s = self.recorded
        policy = load_policy(self.policy_path)
        tier = policy.routing.reasoning_tier
        profile = profile_for(policy.tiers[tier], self.profile_path)
        if overhead_s_per_seq is not None:
            profile = replace(profile, overhead_s_per_seq=overhead_s_per_seq)
        return replay_engine(workload, policy, tier, profile, CONFIGS[self.config], drain_s, kv_tokens)


def engine_case(name: str, run: EngineRun, overhead_s_per_seq: float | None = None) -> Case:
    """A recorded bare-engine run replayed through one simulated replica."""
    real, workload, _, _ = run.recorded
    sim = run.replay(overhead_s_per_seq).summary(workload.duration_s)
    figures = [Figure("goodput req/s", real["goodput_rps"], sim["goodput_rps"]),
               Figure("output tok/s", real["output_tokens_per_s"], sim["output_tokens_per_s"])]
    for cls in ("easy", "medium", "hard"):
        r, s = real["per_class"][cls], sim["per_class"][cls]
        figures += [
            Figure(f"{cls} finished", r["finished"], s["finished"]),
            Figure(f"{cls} TTFVT p50 s", r["ttfvt_s"]["p50"], s["ttfvt_s"]["p50"]),
            Figure(f"{cls} TTFVT p99 s", r["ttfvt_s"]["p99"], s["ttfvt_s"]["p99"]),
        ]
    return Case(name, "bare engine", figures)


def fit_engine_overhead(run: EngineRun, iterations: int = 14) -> float:
    """The serving overhead per sequence and step at which the replayed run's output tokens per second match the
    recorded ones (bisection; use a run that kept the engine busy, or throughput says nothing)."""
    target = run.recorded[0]["output_tokens_per_s"]
    low, high = 0.0, 1e-3
    for _ in range(iterations):
        middle = (low + high) / 2
        if run.replay(middle).output_tokens_per_s > target:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def markdown(cases: Sequence[Case]) -> str:
    lines = ["# The simulator against real runs", ""]
    errors = [abs(f.error) for c in cases for f in c.figures if f.error is not None]
    if errors:
        within = sum(e <= 0.25 for e in errors)
        lines += [f"{within} of {len(errors)} figures within 25 % ({sum(e <= 0.10 for e in errors)} within 10 %); "
                  f"median absolute error {sorted(errors)[len(errors) // 2]:.0%}.", ""]
    for case in cases:
        lines += [f"## {case.name} ({case.kind})", "", "| figure | real | simulated | error |", "|---|---|---|---|"]
        for f in case.figures:
            real = "-" if f.real is None else f"{f.real:.3g}"
            sim = "-" if f.sim is None else f"{f.sim:.3g}"
            error = "-" if f.error is None else f"{f.error:+.0%}"
            lines.append(f"| {f.name} | {real} | {sim} | {error} |")
        lines.append("")
    return "\n".join(lines)
