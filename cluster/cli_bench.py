"""`thinktier bench`: benchmarks of the serving path, written under loadtest/results/."""

from __future__ import annotations

import argparse
from pathlib import Path

from policies.loader import DEFAULT_POLICY

TINY_POLICY = DEFAULT_POLICY.parent / "examples" / "tiny.yaml"


def _overhead(args: argparse.Namespace) -> int:
    from loadtest.overhead_bench import run

    result = run(args.policy, args.tier, args.requests, args.answer_tokens, Path(args.out))
    print(f"added by ingress + router, median per request: e2e {result.added_e2e_median_ms:+.1f} ms, "
          f"time to first answer token {result.added_ttft_median_ms:+.1f} ms  (details: {args.out}/overhead.md)")
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
    overhead.add_argument("--out", default="loadtest/results", help="output folder (default loadtest/results)")
    overhead.set_defaults(func=_overhead)
