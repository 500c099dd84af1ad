"""`thinktier bench fullstack`: the whole stack (Serve's proxy, Ingress, tiers, vLLM) on a GPU machine, measured at
the front door, policy after policy (loadtest/bench/fullstack/)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from thinktier.loadtest.bench.fullstack import fullstack_driver
from thinktier.loadtest.bench.fullstack.fullstack_report import write_summary
from thinktier.loadtest.bench.fullstack.fullstack_settings import MIN_CONFIG_S, LoadArgs, Settings
from thinktier.loadtest.bench.fullstack.fullstack_targets import Config, Kind
from thinktier.loadtest.workload import Mix
from thinktier.policies.loader import PolicyError, dump_policy, load_policy, load_policy_with

DEFAULT_MIX = "easy=0.5,medium=0.3,hard=0.1,chat=0.1"


def _parse(text: str, kind: Kind, flag: str) -> Config:
    name, sep, policy = text.partition("=")
    if not sep or not name or not policy:
        raise argparse.ArgumentTypeError(f"{flag} {text!r}: expected NAME=POLICY, e.g. tiered=policies/gpu.yaml")
    return Config(name, Path(policy).resolve(), kind)


def _config(text: str) -> Config:
    return _parse(text, "thinktier", "--config")


def _peer(text: str) -> Config:
    return _parse(text, "ray-serve-llm", "--peer")


def _setting(text: str) -> tuple[str, str, str]:
    name, sep, rest = text.partition(":")
    knob, eq, value = rest.partition("=")
    if not sep or not eq or not name or not knob or not value:
        raise argparse.ArgumentTypeError(
            f"--set {text!r}: expected NAME:KNOB=VALUE, e.g. ongoing:tiers.reasoning.autoscaling.signal=ongoing_requests"
        )
    return name, knob, value


def _with_settings(configs: list[Config], settings: list[tuple[str, str, str]], out: Path) -> list[Config]:
    """Configs whose policy --set changes, each served from its changed copy written to OUT/NAME-policy.yaml."""
    unknown = sorted({name for name, _, _ in settings} - {c.name for c in configs})
    if unknown:
        raise ValueError(f"--set names no config {unknown}; configs are {[c.name for c in configs]}")
    changed = []
    for config in configs:
        mine = [(knob, value) for name, knob, value in settings if name == config.name]
        if not mine:
            changed.append(config)
            continue
        policy = load_policy_with(config.policy, mine)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{config.name}-policy.yaml"
        path.write_text(dump_policy(policy))
        changed.append(Config(config.name, path.resolve(), config.kind))
    return changed


def _mix(text: str) -> str:
    try:
        Mix.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _check_policies(configs: list[Config], slo_policy: Path) -> str | None:
    """Why the run cannot start (a repeated name, an invalid policy), before anything starts; None if it can."""
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        return f"config names must be unique; got {names}"
    for path in sorted({slo_policy, *(c.policy for c in configs)}):
        try:
            load_policy(path)
        except (PolicyError, OSError) as exc:
            return f"{path}: {exc}"
    return None


def _fullstack(args: argparse.Namespace) -> int:
    if args.summarize is not None:
        print(write_summary(args.summarize), end="")
        if args.baseline is not None:
            from thinktier.loadtest.bench.fullstack.fullstack_compare import write_comparison  # lazily: matplotlib imports slowly

            try:
                print(write_comparison(args.summarize, args.baseline), end="")
                if args.scaling is not None:
                    from thinktier.loadtest.bench.scaling_compare import write as write_scaling

                    print(write_scaling(args.summarize, args.scaling, args.baseline), end="")
            except ValueError as exc:
                print(f"bench fullstack: {exc}", file=sys.stderr)
                return 2
        return 0
    if not args.config or args.out is None:
        print("bench fullstack: --config or --peer, and --out, are needed (or --summarize DIR)", file=sys.stderr)
        return 2
    try:
        configs = _with_settings(args.config, args.set, args.out)
    except (PolicyError, ValueError) as exc:
        print(f"bench fullstack: {exc}", file=sys.stderr)
        return 2
    slo_policy = (args.slo_policy or configs[0].policy).resolve()
    problem = _check_policies(configs, slo_policy)
    if problem is not None:
        print(f"bench fullstack: {problem}", file=sys.stderr)
        return 2
    load = LoadArgs(slo_policy, args.rate, args.shape, args.duration, args.seed, args.mix, args.request_timeout)
    settings = Settings(args.out, load, args.port, args.ready_timeout, args.sample_every, args.deadline)
    runs = fullstack_driver.run(configs, settings)
    print((args.out / "fullstack.md").read_text() if runs else "no policy was run", flush=True)
    return 0 if len(runs) == len(configs) and not any(r.error for r in runs) else 1


def add_fullstack(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "fullstack",
        help="the whole stack on a GPU machine, policy after policy: start-up, idle reply latency, seeded load, "
        "CPU per process class",
        description="For each --config in order: start `thinktier up`, wait for /readyz, warm up, time three "
        "256-token replies on idle engines, run `thinktier loadtest run` while sampling per-process CPU (Ingress, "
        "Serve proxy, tier replicas, engine cores), /metrics and nvidia-smi, stop it and wait for empty GPUs. "
        "Writes NAME-report.{json,md}, NAME-fullstack.json and fullstack.md under --out.",
    )
    p.add_argument("--config", dest="config", action="append", type=_config, default=[], metavar="NAME=POLICY",
                   help="a policy to serve with thinktier and measure, under a name; repeatable, run in order")
    p.add_argument("--peer", dest="config", action="append", type=_peer, metavar="NAME=POLICY",
                   help="Ray Serve LLM (`thinktier loadtest peer`) on the policy's reasoning tier: its engine settings, "
                   "replicas and prefix-aware routing, every request with the budget of the policy's default effort "
                   "(vLLM's thinking_token_budget and max_tokens); runs in order with the --config entries")
    p.add_argument("--set", type=_setting, action="append", default=[], metavar="NAME:KNOB=VALUE",
                   help="change one field of config NAME's policy (repeatable; it is served from OUT/NAME-policy.yaml), "
                   "e.g. ongoing:tiers.reasoning.autoscaling.signal=ongoing_requests")
    p.add_argument("--slo-policy", type=Path, default=None,
                   help="policy whose slos judge every config (default: the first config's policy)")
    p.add_argument("--rate", type=float, default=4.0, help="mean arrival rate, requests/s (default 4)")
    p.add_argument("--shape", type=float, default=0.5, help="Gamma shape of inter-arrival times (default 0.5)")
    p.add_argument("--duration", type=float, default=90.0, help="seconds of arrivals (default 90)")
    p.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    p.add_argument("--mix", type=_mix, default=DEFAULT_MIX, help=f"request classes (default {DEFAULT_MIX})")
    p.add_argument("--request-timeout", type=float, default=180.0,
                   help="seconds after which a request counts as an error (default 180)")
    p.add_argument("--port", type=int, default=8000, help="HTTP port of thinktier (default 8000)")
    p.add_argument("--ready-timeout", type=float, default=300.0,
                   help="seconds to wait for /readyz, passed to `thinktier up --timeout` (default 300)")
    p.add_argument("--sample-every", type=float, default=2.0, help="seconds between CPU and /metrics samples (default 2)")
    p.add_argument("--deadline", type=float, default=570.0,
                   help="seconds from the start by which all must be done; a config is skipped when fewer than "
                   f"{MIN_CONFIG_S:.0f} + --duration s are left (start-up, arrivals, drain, stop) (default 570)")
    p.add_argument("--out", type=Path, default=None, help="output folder")
    p.add_argument("--summarize", type=Path, default=None, metavar="DIR",
                   help="only rebuild DIR/fullstack.md from the NAME-fullstack.json and NAME-report.json there")
    p.add_argument("--baseline", default=None, metavar="NAME",
                   help="with --summarize: also write DIR/compare.{md,json} (every metric of `thinktier loadtest compare` "
                   "as a ratio to config NAME) and PNG plots (TTFVT p99 per class, and per config latency CDFs and KV "
                   "occupancy)")
    p.add_argument("--scaling", default=None, metavar="TIER",
                   help="with --summarize and --baseline: also compare the configs' autoscaling of TIER (SLO misses, "
                   "replica-seconds routable and held, time from KV pressure to a new routable replica, traces) in "
                   "DIR/autoscaling.{md,json,png}")
    p.set_defaults(func=_fullstack)
