"""`thinktier plan`: capacity planning by simulation (loadtest/sim/plan.py): a cluster of any size under a policy and a
workload, on simulated time, with the project's real routing, request-router and autoscaling code."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from thinktier.cli.args import engine_timing_error, policy_setting
from thinktier.cli.loadtest import DEFAULT_MIX, _mix, _positive
from thinktier.loadtest.workload import Mix
from thinktier.policies.loader import PolicyError, load_policy_with


def _pairs(text: str, flag: str) -> dict[str, str]:
    pairs = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected NAME=VALUE[,NAME=VALUE...]")
        pairs[key] = value
    return pairs


def _replicas(text: str) -> dict[str, int]:
    try:
        return {k: int(v) for k, v in _pairs(text, "--replicas").items()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"--replicas {text!r}: counts must be whole numbers, e.g. reasoning=100") from None


def _sweep(text: str) -> tuple[str, list[str]]:
    knob, sep, values = text.partition("=")
    if not sep or not knob or not values:
        raise argparse.ArgumentTypeError(
            f"--sweep {text!r}: expected KNOB=v1,v2,... e.g. tiers.reasoning.engine.scheduling_policy=fcfs,priority"
        )
    return knob, [v for v in _top_level_split(values) if v]


def _top_level_split(text: str) -> list[str]:
    """Split at commas outside brackets and braces, so a value may be JSON: {"easy":0,"hard":2},{"easy":0,"hard":0}."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += char in "[{"
        depth -= char in "]}"
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return [*parts, text[start:]]


def _plan(args: argparse.Namespace) -> int:
    from thinktier.loadtest.sim import plan  # lazily: numpy, the classifier and Ray's router module
    from thinktier.loadtest.sim.sim_cluster import SimSettings
    from thinktier.loadtest.sim.sim_profile import gpu_tier_profiles
    from thinktier.loadtest.sim.sim_workload import WorkloadSpec

    try:
        policy = load_policy_with(args.policy, args.set)
    except (PolicyError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    unknown = sorted(set(args.replicas) - set(policy.tiers))
    if unknown:
        print(f"--replicas: no tier {unknown} in {args.policy}; tiers are {sorted(policy.tiers)}", file=sys.stderr)
        return 2
    if args.workload is not None:
        workload = WorkloadSpec.from_report(args.workload)
    else:
        languages = None if args.languages == "all" else tuple(c.strip() for c in args.languages.split(","))
        workload = WorkloadSpec(args.mix, args.rate, args.shape, args.duration, args.seed, languages,
                                args.diurnal_amplitude, args.diurnal_period)
    settings = SimSettings(tick_s=args.tick, startup_s=args.startup, drain_s=args.drain, autoscale=not args.no_autoscale,
                           replicas=args.replicas)
    if (timing_error := engine_timing_error(args.step_profile, args.serving_overhead_us)) is not None:
        print(timing_error, file=sys.stderr)
        return 2
    overhead = None if args.serving_overhead_us is None else args.serving_overhead_us * 1e-6
    inputs = plan.PlanInputs(policy, workload, args.lengths, settings, gpu_tier_profiles(policy.tiers, args.step_profile),
                             overhead)
    out = args.out
    if args.calibrate is not None:
        from thinktier.loadtest.report import Report

        real = Report.model_validate_json(args.calibrate.read_text())
        overhead, result = plan.calibrate_overhead(inputs, real)
        print(f"serving overhead {overhead * 1e6:.1f} us per sequence and step: simulated {result.run.tps:.0f} output tok/s "
              f"against the run's {real.runs[0].tps:.0f}; put it in the profile's serving.overhead_s_per_seq")
        return 0
    if args.sweep is not None:
        knob, values = args.sweep
        try:
            rows = plan.sweep(inputs, knob, values)
        except (PolicyError, ValueError) as exc:
            print(exc, file=sys.stderr)
            return 1
        for value, result in rows:
            plan.write(result, out / f"{knob}={value}", f"{knob}={value}", args.device_hour_usd, args.requests)
        print(plan.sweep_markdown(knob, rows, args.device_hour_usd), end="")
        (out / "sweep.md").write_text(plan.sweep_markdown(knob, rows, args.device_hour_usd))
        return 0
    if args.min_replicas_for_slo:
        counts, result = plan.min_replicas_for_slo(inputs, args.slo_target)
        chosen = ", ".join(f"{k}={v}" for k, v in counts.items())
        title = f"fewest replicas meeting SLO attainment {args.slo_target:g}: {chosen}"
    else:
        result = plan.simulate(inputs)
        title = f"{args.policy}"
    paths = plan.write(result, out, title, args.device_hour_usd, args.requests)
    print(f"{title}: goodput {result.run.goodput_rps:.2f} req/s, SLO attainment {plan.slo_attainment(result):.3f}, "
          f"simulated {result.sim.end_s:.0f} s in {result.wall_s:.1f} s; wrote {', '.join(p.name for p in paths)} to {out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "plan",
        help="simulate a cluster of any size under a policy and a workload (capacity planning)",
        description="Simulate the policy's tiers on simulated time: seeded Gamma arrivals (optionally with a diurnal "
        "swing), the real difficulty classifier, routing and degradation, request router and autoscaler, and vLLM "
        "replicas (continuous batching, KV cache sized from the policy, FCFS or priority scheduling, preemption with "
        "recompute) timed by a measured step profile. Writes plan.md, plan.json and PNG plots: replicas, KV occupancy "
        "and stragglers per tier over time, per-class TTFVT and E2E, goodput, device-hours and cost per 1,000 answers.",
    )
    p.add_argument("--policy", required=True, type=Path, help="policy file to simulate")
    p.add_argument("--set", type=policy_setting, action="append", default=[], metavar="KNOB=VALUE",
                   help="change one policy field before simulating (repeatable), e.g. tiers.reasoning.replicas.max=1000")
    w = p.add_argument_group("workload (the load test's definitions: the same seed gives the same prompts at the same times)")
    w.add_argument("--workload", type=Path, default=None, metavar="REPORT.json",
                   help="replay the workload of a recorded `thinktier loadtest run` (its mix, rate, shape, duration, seed)")
    w.add_argument("--rate", type=_positive, default=8.0, help="mean arrival rate, requests/s (default 8)")
    w.add_argument("--shape", type=_positive, default=0.5,
                   help="Gamma shape of inter-arrival times; <1 is bursty (default 0.5)")
    w.add_argument("--duration", type=_positive, default=600.0, help="seconds of arrivals (default 600)")
    w.add_argument("--mix", type=_mix, default=Mix.parse(DEFAULT_MIX), help=f"request classes (default {DEFAULT_MIX})")
    w.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    w.add_argument("--languages", default="en", help="problem-set languages, or 'all' (default en)")
    w.add_argument("--diurnal-amplitude", type=float, default=0.0, metavar="A",
                   help="the rate swings between rate x (1 - A) and rate x (1 + A) (default 0: constant)")
    w.add_argument("--diurnal-period", type=_positive, default=86_400.0, metavar="SECONDS",
                   help="period of the swing (default a day)")
    w.add_argument("--lengths", default="budget",
                   help="what requests would generate: 'budget' (think and answer until the budget stops them, as "
                   "dummy-weight engines do) or 'recorded:REQUESTS.jsonl' (each class's lengths from a recorded load test)")
    c = p.add_argument_group("cluster")
    c.add_argument("--replicas", type=_replicas, default={}, metavar="TIER=N[,TIER=N]",
                   help="initial replicas per tier (default: the policy's initial or min)")
    c.add_argument("--no-autoscale", action="store_true", help="keep every tier at its initial replica count")
    c.add_argument("--startup", type=_positive, default=150.0,
                   help="seconds from asking for a replica to it serving (default 150)")
    c.add_argument("--tick", type=_positive, default=1.0,
                   help="seconds between stats reports and autoscaler decisions (default 1)")
    c.add_argument("--drain", type=_positive, default=600.0,
                   help="seconds after the last arrival that requests may finish (default 600)")
    c.add_argument("--device-hour-usd", type=float, default=3.0, help="price of one GPU (or CPU replica) hour (default 3)")
    c.add_argument("--step-profile", type=Path, default=None, metavar="PROFILE.json",
                   help="the step profile of every GPU tier (default: the H200's, loadtest/results/gpu/h200_step_profile.json; "
                   "the H100's is loadtest/results/gpu-deadline/h100_step_profile.json)")
    c.add_argument("--serving-overhead-us", type=float, default=None, metavar="US",
                   help="the engine process's cost per running sequence and step, in microseconds, in place of the step "
                   "profile's (the H200's: 66, fitted on its full stack with vLLM's budget processor); `thinktier bench "
                   "planner` fits today's engine on an H100 run and says the value in "
                   "loadtest/results/plan/validation.md: 14.9)")
    m = p.add_argument_group("what to answer (default: one simulation)")
    m.add_argument("--sweep", type=_sweep, default=None, metavar="KNOB=v1,v2",
                   help="one simulation per value of a policy field, e.g. tiers.reasoning.engine.scheduling_policy=fcfs,priority")
    m.add_argument("--min-replicas-for-slo", action="store_true",
                   help="the fewest fixed replicas per tier whose SLO attainment reaches --slo-target")
    m.add_argument("--slo-target", type=float, default=0.99, help="SLO attainment to reach (default 0.99)")
    m.add_argument("--calibrate", type=Path, default=None, metavar="REPORT.json",
                   help="fit the serving overhead per sequence and step so that this policy on the recorded run's "
                   "workload gives the run's output tokens per second; prints it")
    p.add_argument("--out", type=Path, default=Path("loadtest/results/plan"),
                   help="output folder (default loadtest/results/plan)")
    p.add_argument("--requests", action="store_true",
                   help="also write the load test's own report.json, report.md and requests.jsonl (every simulated "
                   "request): `thinktier loadtest compare --summarize` reads plans laid out as TARGET/seed-S/ as it reads "
                   "load tests")
    p.set_defaults(func=_plan)

