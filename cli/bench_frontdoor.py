"""`thinktier bench frontdoor`: the HTTP front door alone, thinktier vs a bare FastAPI floor, synthetic tokens."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from thinktier.loadtest.bench.frontdoor.frontdoor_settings import FRONTDOOR_POLICY, BenchSettings

DEFAULTS = BenchSettings()


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x)


def _frontdoor(args: argparse.Namespace) -> int:
    from thinktier.loadtest.bench.frontdoor.frontdoor_bench import run

    settings = BenchSettings(
        streams=args.streams,
        tokens_per_stream_per_s=args.tokens_per_stream_per_s,
        rates=args.rates,
        thinking_tokens=args.thinking_tokens,
        answer_tokens=args.answer_tokens,
        duration_s=args.duration,
        intervals_ms=args.intervals_ms,
        ingress_replicas=args.ingress_replicas,
        tier_replicas=args.tier_replicas,
        floor_workers=args.floor_workers,
        client_procs=args.client_procs,
        port=args.port,
        policy=Path(args.policy),
        http_proxy=args.http_proxy,
        out=Path(args.out),
    )
    report = run(settings, " ".join(["thinktier", *sys.argv[1:]]))
    for v in report.variants:
        added = v.added_ms()["inter_token_ms"]["p50"]
        print(f"{v.variant.label}: thinktier {v.thinktier.achieved_tps:,.0f} tok/s, floor {v.floor.achieved_tps:,.0f} tok/s, "
              f"added inter-token p50 {added if added is None else f'{added:+.2f} ms'}")
    print(f"details: {settings.out}/frontdoor.md")
    return 0


def add_frontdoor(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "frontdoor",
        help="the HTTP path alone (proxy -> Ingress -> tier) at GPU token rates, without a model, vs a bare FastAPI floor",
        description="Serves the real Ingress and LoadBoard in front of a synthetic tier that streams tokens at a set rate "
        "per stream (no model, no GPU), and a bare FastAPI process that serves the same streams (the floor). Client "
        "processes keep --streams streaming chat completions in flight and time every SSE event; the CPU of the Ingress, "
        "the Serve HTTP proxy, the tier and the floor is read from /proc over the same window. For each stream interval "
        "(--intervals-ms; 0 sends every engine step as its own message, the old path) and, with --ingress-replicas > 1, "
        "once more with that many Ingress replicas: achieved vs offered tokens/s, CPU, cores per 1,000 tokens/s, TTFT and "
        "inter-token latency, and what thinktier adds over the floor. Writes frontdoor.json, frontdoor.md and "
        "frontdoor.png to --out. Offered load = streams x tokens per stream per second (default 256 x 80 = 20,000 tok/s).",
    )
    p.add_argument("--streams", type=int, default=DEFAULTS.streams,
                   help=f"concurrent streaming requests kept in flight (closed loop; default {DEFAULTS.streams})")
    p.add_argument("--tokens-per-stream-per-s", type=float, default=DEFAULTS.tokens_per_stream_per_s,
                   help=f"decode rate of each stream: one token per engine step (default {DEFAULTS.tokens_per_stream_per_s:g})")
    p.add_argument("--rates", type=_floats, default=DEFAULTS.rates,
                   help="offered loads to sweep, total tokens/s, comma separated (e.g. 10000,20000,40000): each runs every "
                   "variant at RATE / --streams per stream, instead of --tokens-per-stream-per-s")
    p.add_argument("--thinking-tokens", type=int, default=DEFAULTS.thinking_tokens,
                   help=f"reasoning tokens per request, streamed before the answer (default {DEFAULTS.thinking_tokens})")
    p.add_argument("--answer-tokens", type=int, default=DEFAULTS.answer_tokens,
                   help=f"answer tokens per request (default {DEFAULTS.answer_tokens})")
    p.add_argument("--duration", type=float, default=DEFAULTS.duration_s,
                   help=f"seconds measured per variant and path, after a ramp of one request's length (default "
                   f"{DEFAULTS.duration_s:g})")
    p.add_argument("--intervals-ms", type=_floats, default=DEFAULTS.intervals_ms,
                   help="server.stream_interval_ms values to compare, comma separated (default 0,50: every step alone, "
                   "and the policy default)")
    p.add_argument("--ingress-replicas", type=int, default=DEFAULTS.ingress_replicas,
                   help=f"Ingress replicas of one more variant, at the largest interval (default "
                   f"{DEFAULTS.ingress_replicas}; 1 adds none)")
    p.add_argument("--http-proxy", choices=("serve", "haproxy"), default=DEFAULTS.http_proxy,
                   help="the policy's server.http_proxy for the whole run: Serve's proxy actor, or Ray Serve's HAProxy "
                   f"mode in front of Ingress replicas that serve HTTP themselves (default {DEFAULTS.http_proxy})")
    p.add_argument("--tier-replicas", type=int, default=DEFAULTS.tier_replicas,
                   help=f"synthetic reasoning-tier replicas (default {DEFAULTS.tier_replicas}); raise it when the report's "
                   "tier CPU nears 100%% per replica, so that making tokens is not what limits thinktier")
    p.add_argument("--floor-workers", type=int, default=DEFAULTS.floor_workers,
                   help=f"uvicorn worker processes of the floor (default {DEFAULTS.floor_workers}); raise it when the floor's "
                   "CPU nears 100%% per worker and it falls short of the offered load")
    p.add_argument("--client-procs", type=int, default=DEFAULTS.client_procs,
                   help=f"client processes sharing the streams, so the client is not the bottleneck (default "
                   f"{DEFAULTS.client_procs}); their CPU is reported")
    p.add_argument("--port", type=int, default=DEFAULTS.port,
                   help=f"thinktier's HTTP port; the floor uses the next one (default {DEFAULTS.port})")
    p.add_argument("--policy", default=str(FRONTDOOR_POLICY),
                   help="base policy, copied per variant (default policies/examples/frontdoor-bench.yaml)")
    p.add_argument("--out", default=str(DEFAULTS.out), help=f"output folder (default {DEFAULTS.out})")
    p.set_defaults(func=_frontdoor)
