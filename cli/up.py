"""`thinktier up`: serve a policy on this machine until Ctrl-C."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time

from thinktier.policies.loader import PolicyError


def _up(args: argparse.Namespace) -> int:
    from thinktier.cluster.local import LocalCluster, StartupError  # Ray: only when serving (cli/main.py)

    started = time.monotonic()

    def progress(line: str) -> None:
        print(f"[{time.monotonic() - started:6.1f}s] {line}", flush=True)

    try:
        cluster = LocalCluster(args.policy, port=args.port, host=args.host, progress=progress)
    except PolicyError as err:
        print(err)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        cluster.start(timeout_s=args.timeout)
        signal.signal(signal.SIGTERM, lambda *_: stop.set())  # again: ray.init put in its own, which exits at once
        tiers = ", ".join(f"{cluster.policy.served_name(t)} ({t})" for t in cluster.policy.tiers)
        print(f"\nthinktier is serving on {cluster.url}  (models: thinktier = auto-routed, {tiers})")
        print(f"  try: curl {cluster.url}/v1/chat/completions -H 'Content-Type: application/json' "
              "-d '{\"model\": \"thinktier\", \"messages\": [{\"role\": \"user\", \"content\": \"What is 17 * 23?\"}]}'")
        print(f"  metrics: {cluster.url}/metrics   readiness: {cluster.url}/readyz   Ctrl-C stops.\n", flush=True)
        while not stop.wait(1):
            pass
    except StartupError as err:
        print(f"thinktier up: {err}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave Ray half stopped
        print(f"draining requests in flight (at most {cluster.policy.server.drain_timeout_s:g} s: "
              "server.drain_timeout_s), then shutting down Ray ...", flush=True)
        cluster.stop()
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    up = subparsers.add_parser(
        "up",
        help="serve thinktier on this machine (Ray + Serve + vLLM tiers) until Ctrl-C",
        description="Start a local Ray cluster, deploy the tiers, router and OpenAI endpoint the policy describes, "
        "and serve until Ctrl-C. Builtin models are built on first use (about a minute).",
    )
    up.add_argument("--policy", default=None, help="policy YAML file (default: the embedded policies/default.yaml)")
    up.add_argument("--host", default=None, help="bind address (default: the policy's server.host, 127.0.0.1)")
    up.add_argument("--port", type=int, default=None, help="HTTP port (default: the policy's server.port, 8000)")
    up.add_argument("--timeout", type=float, default=900, help="seconds to wait for the engines to load (default 900)")
    up.set_defaults(func=_up)
