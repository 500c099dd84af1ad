"""`thinktier bench`: benchmarks of the serving path, written under loadtest/results/."""

from __future__ import annotations

import argparse
from pathlib import Path

from policies.loader import DEFAULT_POLICY

TINY_POLICY = DEFAULT_POLICY.parent / "examples" / "tiny.yaml"


def _overhead(args: argparse.Namespace) -> int:
    from loadtest.overhead_bench import run

    result = run(args.policy, args.tier, args.requests, args.answer_tokens, Path(args.out), args.with_classifier)
    print(f"added by ingress + router, median per request: e2e {result.added_e2e_median_ms:+.1f} ms, "
          f"time to first answer token {result.added_ttft_median_ms:+.1f} ms  (details: {args.out}/overhead.md)")
    return 0


def _autoscaling(args: argparse.Namespace) -> int:
    from loadtest.autoscaling_bench import Workload, run

    workload = Workload(args.rate, args.shape, args.duration, args.mix, args.seed, args.effort, args.max_prompt_chars)
    command = (f"thinktier bench autoscaling --policy {args.policy} --tier {args.tier} --rate {args.rate} --shape {args.shape} "
               f"--duration {args.duration} --mix {args.mix} --seed {args.seed} --effort {args.effort}")
    results = run(Path(args.policy), args.tier, workload, Path(args.out), args.port, command)
    for r in results:
        print(f"{r['signal']:>18}: SLO misses {r['slo_misses']}/{r['requests']}, replica-seconds {r['replica_seconds']:.0f}, "
              f"max replicas {r['max_replicas']}")
    print(f"details: {args.out}/autoscaling.md")
    return 0


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
    overhead.add_argument("--with-classifier", action="store_true",
                          help="keep the policy's difficulty classifier on (default: off, to measure ingress and router alone)")
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
