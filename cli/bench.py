"""`thinktier bench`: benchmarks of the serving path, written under loadtest/results/."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from thinktier.cli.args import engine_timing_error, policy_setting
from thinktier.cli.bench_economy import add_economy
from thinktier.cli.bench_frontdoor import add_frontdoor
from thinktier.cli.bench_fullstack import add_fullstack
from thinktier.cli.bench_reasoner import add_reasoner
from thinktier.loadtest.bench.gpu import gpu_bench
from thinktier.loadtest.bench.gpu.gpu_configs import CONFIGS, parse_plan
from thinktier.loadtest.bench.gpu.gpu_results import markdown_table
from thinktier.loadtest.bench.gpu.gpu_step_profile import write_step_profile
from thinktier.loadtest.bench.gpu.gpu_workload import CLASSES, DEFAULT_MIX, read_workloads, write_workload
from thinktier.loadtest.workload import Mix
from thinktier.policies.loader import DEFAULT_POLICY, PolicyError, load_policy_with

TINY_POLICY = DEFAULT_POLICY.parent / "examples" / "tiny.yaml"


def _overhead(args: argparse.Namespace) -> int:
    from thinktier.loadtest.bench.overhead_bench import run

    result = run(args.policy, args.tier, args.requests, args.answer_tokens, Path(args.out), args.classifier, args.http_proxy,
                 args.classifier_artifact)
    print(f"added by ingress + router, median per request: e2e {result.added_e2e_median_ms:+.1f} ms, "
          f"time to first answer token {result.added_ttft_median_ms:+.1f} ms  (details: {args.out}/overhead.md)")
    return 0


def _planner(args: argparse.Namespace) -> int:
    from thinktier.loadtest.sim.plan_bench import run

    text, measured = run(args.out, with_speed=not args.no_speed)
    print(text.splitlines()[2] if len(text.splitlines()) > 2 else text)
    if measured is not None:
        print(f"1,000 replicas for {measured['simulated_s']:.0f} simulated s ({measured['requests']:,} requests): "
              f"{measured['wall_s']} s of wall time (aim < 300 s)")
    print(f"wrote {args.out}/validation.md" + (" and speed.json" if measured is not None else ""))
    return 0


def _autoscaling(args: argparse.Namespace) -> int:
    from thinktier.loadtest.bench.autoscaling_bench import Workload, run

    workload = Workload(args.rate, args.shape, args.duration, args.mix, args.seed, args.effort, args.max_prompt_chars)
    command = (f"thinktier bench autoscaling --policy {args.policy} --tier {args.tier} --rate {args.rate} --shape {args.shape} "
               f"--duration {args.duration} --mix {args.mix} --seed {args.seed} --effort {args.effort}")
    results = run(Path(args.policy), args.tier, workload, Path(args.out), args.port, command)
    for r in results:
        print(f"{r['signal']:>18}: SLO misses {r['slo_misses']}/{r['requests']}, replica-seconds {r['replica_seconds']:.0f}, "
              f"max replicas {r['max_replicas']}")
    print(f"details: {args.out}/autoscaling.md")
    return 0


def _gpu_workload(args: argparse.Namespace) -> int:
    languages = args.languages.split(",") if args.languages else None
    try:
        policy = load_policy_with(args.policy, args.set)
    except (PolicyError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 2
    workload = write_workload(
        policy, args.name, Mix.parse(args.mix), args.rate, args.shape, args.duration, args.seed, languages, Path(args.out)
    )
    counts = {k: sum(r.difficulty == k for r in workload.requests) for k in CLASSES}
    print(f"{len(workload.requests)} requests over {args.duration} s {counts} -> {args.out}")
    return 0


def _gpu_run(args: argparse.Namespace) -> int:
    try:
        workloads = read_workloads(args.workload)
        plan = parse_plan(args.config, workloads)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    settings = gpu_bench.RunSettings(
        model=args.model,
        load_format=args.load_format,
        kv_cache_gib=args.kv_cache_gib,
        gpu_memory_utilization=args.gpu_memory_utilization,
        enforce_eager=args.enforce_eager,
        drain_s=args.drain_s,
        profile_batches=args.profile_batches,
        profile_contexts=args.profile_contexts,
        seed=args.seed,
    )
    gpu_bench.run(args.policy, workloads, plan, settings, Path(args.out), " ".join(["thinktier", *sys.argv[1:]]),
                  policy_settings=args.set)
    return 0


def _gpu_simulate(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from thinktier.loadtest.sim.engine_replay import simulate_bench
    from thinktier.loadtest.sim.sim_profile import profile_for

    try:
        policy = load_policy_with(Path(args.policy), args.set)
        workloads = read_workloads(args.workload)
        plan = parse_plan(args.config, workloads)
        if (timing_error := engine_timing_error(args.step_profile, args.serving_overhead_us)) is not None:
            raise ValueError(timing_error)
        profile = profile_for(policy.tiers[policy.routing.reasoning_tier], args.step_profile)
        if args.serving_overhead_us is not None:
            profile = replace(profile, overhead_s_per_seq=args.serving_overhead_us * 1e-6)
        results = simulate_bench(policy, workloads, plan, profile, args.kv_cache_gib, args.drain_s)
    except (PolicyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    device = f"simulated: step profile {profile.name}, serving overhead {profile.overhead_s_per_seq * 1e6:.1f} us"
    report = {
        "command": " ".join(["thinktier", *sys.argv[1:]]), "policy": args.policy, "model": "simulated", "load_format": "-",
        "kv_cache_gib": args.kv_cache_gib, "drain_s": args.drain_s, "gpu": device,
        "workloads": {n: w.header() for n, w in workloads.items()},
        "results": results,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(markdown_table([report]), end="")
    print(f"wrote {out} ({device})")
    return 0


def _gpu_table(args: argparse.Namespace) -> int:
    print(markdown_table([json.loads(Path(path).read_text()) for path in args.reports]), end="")
    return 0


def _gpu_step_profile(args: argparse.Namespace) -> int:
    try:
        data = write_step_profile(Path(args.report), args.config, Path(args.out), args.geometry_from, args.device_memory_gib)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"{len(data['points'])} points -> {args.out}")
    return 0


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def _register_gpu(commands: argparse._SubParsersAction) -> None:
    gpu = commands.add_parser(
        "gpu",
        help="one reasoning-tier replica on a GPU under open-loop reasoning load, configuration by configuration",
        description="Benchmark one reasoning-tier replica (thinktier's TierEngine, no Ray) on a GPU under open-loop "
        "reasoning load, configuration by configuration. Write the workload here with `workload`, run it on the "
        "GPU machine with `run`.",
    )
    sub = gpu.add_subparsers(title="steps", metavar="STEP", required=True)
    w = sub.add_parser("workload", help="Write an open-loop workload (JSON) from the problem sets and the policy's budgets.")
    w.add_argument("--policy", required=True, help="Policy file; budgets and priorities of its reasoning tier are used.")
    w.add_argument("--set", type=policy_setting, action="append", default=[], metavar="KNOB=VALUE",
                   help="change one policy field first (repeatable), e.g. "
                   "'routing.priority={\"easy\":0,\"medium\":1,\"hard\":1}'")
    w.add_argument("--name", required=True, help="Workload name used in results (and request ids).")
    w.add_argument("--rate", type=float, required=True, help="Mean arrival rate, requests/s.")
    w.add_argument("--shape", type=float, default=0.5, help="Gamma shape of inter-arrival times (1 = Poisson, <1 burstier).")
    w.add_argument("--duration", type=float, default=30, help="Seconds over which requests arrive.")
    w.add_argument("--mix", default=DEFAULT_MIX, help="Class shares, e.g. easy=0.6,medium=0.25,hard=0.15 (no chat).")
    w.add_argument("--languages", default="en", help="Problem languages (ISO 639-1, comma separated; empty for all).")
    w.add_argument("--seed", type=int, default=1)
    w.add_argument("--out", required=True, help="Where to write the workload JSON.")
    w.set_defaults(func=_gpu_workload)
    r = sub.add_parser("run", help="Run configurations on the GPU (needs vLLM with CUDA); writes a JSON report.")
    r.add_argument("--policy", required=True, help="Policy file whose reasoning tier is the base of every configuration.")
    r.add_argument("--set", type=policy_setting, action="append", default=[], metavar="KNOB=VALUE",
                   help="change one policy field first (repeatable), e.g. tiers.reasoning.max_prompt_tokens=512")
    r.add_argument("--model", required=True, help="Model folder (config + tokenizer; weights unless --load-format dummy).")
    r.add_argument("--load-format", default="dummy", help="vLLM load_format; 'dummy' gives random weights of the geometry.")
    r.add_argument("--workload", action="append", default=[], help="NAME=PATH of a workload JSON (repeatable).")
    r.add_argument(
        "--config",
        action="append",
        required=True,
        help=f"CONFIG:STEP[,STEP...] run in order; CONFIG one of {sorted(CONFIGS)}; STEP a workload name or 'profile'.",
    )
    r.add_argument(
        "--kv-cache-gib",
        type=float,
        default=2.0,
        help="Cap the GPU KV cache (GiB) so the workloads put it under pressure; the same for every config.",
    )
    r.add_argument(
        "--gpu-memory-utilization",
        type=float,
        default=0.3,
        help="vLLM's start-up check of free memory; low, so memory a previous engine still frees is no obstacle.",
    )
    r.add_argument("--drain-s", type=float, default=90, help="Seconds after the last arrival before unfinished requests are cut.")
    r.add_argument(
        "--enforce-eager", action="store_true", help="Skip torch.compile and CUDA graphs (faster start, slower decode)."
    )
    r.add_argument("--profile-batches", type=_ints, default=[1, 8, 32, 64, 128, 256], help="Batch sizes of the step profile.")
    r.add_argument("--profile-contexts", type=_ints, default=[512, 2048, 6000], help="Context lengths of the step profile.")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--out", required=True, help="Where to write the JSON report (rewritten after each configuration).")
    r.set_defaults(func=_gpu_run)
    m = sub.add_parser(
        "simulate",
        help="`run` on the simulated engine: the same workloads and configurations, a report in `run`'s shape, seconds",
        description="Replays the workloads through one simulated vLLM engine (`thinktier plan`'s replica: continuous "
        "batching, a token-granular KV cache, FCFS or priority scheduling, preemption with recompute) timed by a "
        "measured step profile, each request with the budget and the priority `run` would send it with. Writes a "
        "report that `table` reads like a GPU run's. On the H100 runs of today's engine it came within 10 % on 62 of "
        "64 figures with the H100 profile and a serving overhead of 15 us (loadtest/results/plan/README.md). No KV "
        "offload, no prefix cache, no step profile.",
    )
    m.add_argument("--policy", required=True, help="Policy file whose reasoning tier is the base of every configuration.")
    m.add_argument("--set", type=policy_setting, action="append", default=[], metavar="KNOB=VALUE",
                   help="change one policy field first (repeatable), e.g. tiers.reasoning.engine.max_num_seqs=128")
    m.add_argument("--workload", action="append", default=[], help="NAME=PATH of a workload JSON (repeatable).")
    m.add_argument("--config", action="append", required=True,
                   help=f"CONFIG:WORKLOAD[,WORKLOAD...]; CONFIG one of {sorted(CONFIGS)} without offload.")
    m.add_argument("--step-profile", type=Path, default=None, metavar="PROFILE.json",
                   help="the card's step profile (default: the H200's; the H100's is "
                   "loadtest/results/gpu-deadline/h100_step_profile.json)")
    m.add_argument("--serving-overhead-us", type=float, default=None, metavar="US",
                   help="the engine process's cost per running sequence and step (default: the profile's)")
    m.add_argument("--kv-cache-gib", type=float, default=2.0, help="KV cache per configuration, as `run` caps it (default 2)")
    m.add_argument("--drain-s", type=float, default=90, help="Seconds after the last arrival before unfinished requests are cut.")
    m.add_argument("--out", required=True, help="Where to write the JSON report.")
    m.set_defaults(func=_gpu_simulate)
    t = sub.add_parser("table", help="Print a Markdown table of `run` reports (one row per configuration and workload).")
    t.add_argument("reports", nargs="+", help="JSON reports written by `run`.")
    t.set_defaults(func=_gpu_table)
    s = sub.add_parser("step-profile", help="Write the planner's step-time data file from a `run` report's profile.")
    s.add_argument("report", help="JSON report written by `run` with a CONFIG:...,profile step.")
    s.add_argument("--config", required=True, help="Configuration whose profile to take.")
    s.add_argument("--geometry-from", type=Path, default=None, metavar="PROFILE.json",
                   help="take the model's geometry (layers, KV heads, head size, weights) from another profile of the same "
                   "model; the planner needs it to turn KV GiB into tokens")
    s.add_argument("--device-memory-gib", type=float, default=None,
                   help="one device's memory (vLLM's 'Initial free memory' line), for KV sized by gpu_memory_utilization")
    s.add_argument("--out", required=True, help="Where to write the data file.")
    s.set_defaults(func=_gpu_step_profile)


def register(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser("bench", help="benchmarks of the serving path", description=__doc__)
    commands = bench.add_subparsers(title="benchmarks", metavar="BENCH", required=True)
    overhead = commands.add_parser(
        "overhead",
        help="latency the ingress and router add over calling the vLLM engine directly",
        description="Runs the same requests (same seeds, same tokens) against the tier's engine in-process and then "
        "through a local thinktier over HTTP, and reports median and p99 per request of both and their difference.",
    )
    overhead.add_argument("--policy", default=str(TINY_POLICY), help="policy file (default: the tiny test policy)")
    overhead.add_argument("--tier", default="chat", help="tier to measure (default: chat)")
    overhead.add_argument("--requests", type=int, default=100, help="requests per side (default 100)")
    overhead.add_argument("--answer-tokens", type=int, default=16, help="answer tokens per request (default 16)")
    overhead.add_argument("--classifier", choices=("off", "deployment", "ingress"), default="off",
                          help="the difficulty classifier off (the default: ingress and router alone), or on, scoring in "
                          "its own deployment or in the Ingress's process (routing.classifier.placement)")
    overhead.add_argument("--classifier-artifact", default=None, metavar="ARTIFACT",
                          help="score with this classifier artifact, e.g. builtin:difficulty-v7 (default: the policy's own)")
    overhead.add_argument("--http-proxy", choices=("serve", "haproxy"), default=None,
                          help="serve the policy with this server.http_proxy (default: the policy's own)")
    overhead.add_argument("--out", default="loadtest/results", help="output folder (default loadtest/results)")
    overhead.set_defaults(func=_overhead)
    scaling = commands.add_parser(
        "autoscaling",
        help="KV- and straggler-aware autoscaling vs Ray Serve's ongoing-requests policy on the same bursty load",
        description="Serves the policy twice (the tier's autoscaling.signal as kv_and_stragglers, then ongoing_requests) "
        "under the same seeded open-loop Gamma workload, and reports SLO misses, goodput, latency, replica-seconds and "
        "the replica count, KV occupancy and stragglers over time (JSON, Markdown, PNG).",
    )
    scaling.add_argument("--policy", default=str(TINY_POLICY.with_name("tiny-autoscaling.yaml")),
                         help="policy file (default: policies/examples/tiny-autoscaling.yaml)")
    scaling.add_argument("--tier", default="reasoning", help="tier whose autoscaling is compared (default: reasoning)")
    scaling.add_argument("--rate", type=float, default=1.5, help="mean arrival rate, requests/s (default 1.5)")
    scaling.add_argument("--shape", type=float, default=0.25, help="Gamma shape of inter-arrival times; <1 is bursty "
                         "(default 0.25: CV 2)")
    scaling.add_argument("--duration", type=float, default=120, help="seconds of arrivals per variant (default 120)")
    scaling.add_argument("--mix", default="easy=0.3,medium=0.3,hard=0.4", help="request classes (default "
                         "easy=0.3,medium=0.3,hard=0.4)")
    scaling.add_argument("--effort", default="high", help="reasoning_effort sent with every request (default high: long "
                         "generations)")
    scaling.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    scaling.add_argument("--max-prompt-chars", type=int, default=500, help="leave out longer prompts (default 500: the tiny "
                         "model's tokenizer makes ~0.7 tokens per character and the policy accepts 384)")
    scaling.add_argument("--port", type=int, default=18766, help="HTTP port of the served variants (default 18766)")
    scaling.add_argument("--out", default="loadtest/results/autoscaling", help="output folder")
    scaling.set_defaults(func=_autoscaling)
    _register_gpu(commands)
    add_frontdoor(commands)
    add_economy(commands)
    add_fullstack(commands)
    add_reasoner(commands)
    planner = commands.add_parser(
        "planner",
        help="the simulator (`thinktier plan`) against the recorded runs, and its speed at 1,000 replicas",
        description="Replays every recorded run the simulator can replay (the H200 full-stack and engine runs, the H100 "
        "runs of today's engine with a serving overhead fitted on one of them, and the 2-core CPU comparison when a CPU "
        "step profile exists) and writes validation.md (each figure real, simulated and the error, and the fitted "
        "overhead in the H100 cases' titles); then simulates 1,000 "
        "reasoning replicas for an hour at 10,000 requests a minute and writes speed.json (wall time; aim under 5 "
        "minutes).",
    )
    planner.add_argument("--out", type=Path, default=Path("loadtest/results/plan"),
                         help="output folder (default loadtest/results/plan)")
    planner.add_argument("--no-speed", action="store_true", help="only the validation")
    planner.set_defaults(func=_planner)
