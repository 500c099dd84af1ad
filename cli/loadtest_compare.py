"""`thinktier loadtest compare`: the comparison matrix's targets started in turn on one workload
(thinktier.loadtest.compare)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from thinktier.cli.args import policy_setting
from thinktier.cli.loadtest import (
    SINGLE_POOL_POLICY,
    THINKTIER_MODEL,
    add_workload_args,
    out_dir,
    pool_of,
    request_options,
    run_settings,
    spec_of,
)
from thinktier.loadtest.compare_targets import LINEUP, lineup
from thinktier.policies.loader import DEFAULT_POLICY, PolicyError, load_policy_with


def _targets(text: str) -> tuple[str, ...]:
    chosen = tuple(t.strip() for t in text.split(",") if t.strip())
    unknown = sorted(set(chosen) - set(LINEUP))
    if unknown or not chosen:
        raise argparse.ArgumentTypeError(f"--targets {text!r}: unknown {unknown}; choose from {', '.join(LINEUP)}")
    return chosen


def _seeds(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--repeat-seeds {text!r}: expected integers separated by commas, e.g. 1,2") from None


def _compare(args: argparse.Namespace) -> int:
    from thinktier.loadtest.compare import compare, load_specs  # lazily: matplotlib is slow to import
    from thinktier.loadtest.compare_report import summarize

    if args.summarize is not None:
        try:
            summarize(args.summarize, args.baseline)
        except ValueError as exc:
            print(f"loadtest compare: {exc}", file=sys.stderr)
            return 2
        print(f"rebuilt {args.summarize / 'compare.md'} from the raw files there")
        return 0
    try:
        policy = load_policy_with(args.policy, args.set)
        pool = load_policy_with(args.single_pool_policy, args.pool_set)
    except (PolicyError, ValueError) as exc:
        print(exc, file=sys.stderr)
        return 1
    if args.ray_llm_tier is not None and args.ray_llm_tier not in pool.tiers:
        print(f"--ray-llm-tier {args.ray_llm_tier!r}: no such tier in {args.single_pool_policy}; tiers are "
              f"{sorted(pool.tiers)}", file=sys.stderr)
        return 2
    out = out_dir(args, "compare")
    names = (Path(args.policy).name + "".join(f" --set {k}={v}" for k, v in args.set),
             Path(args.single_pool_policy).name + "".join(f" --pool-set {k}={v}" for k, v in args.pool_set))
    targets = lineup(policy, pool, out, names, args.ray_llm_tier, args.ray_llm_cpu_threads, args.targets)
    if "tiered-lending" in args.targets and not policy.lending:
        print(f"loadtest compare: tiered-lending left out: {args.policy} has no lending rules (add `lending:` to "
              "compare tiers that lend idle capacity)", file=sys.stderr)
    if args.temperature is None:  # every target samples alike: thinktier's default, sent explicitly
        from thinktier.deployments.request.openai_api import OpenAIRequest

        args.temperature = OpenAIRequest.model_fields["temperature"].default
    try:
        result = compare(
            targets,
            load_specs(spec_of(args), args.repeat_seeds),
            pool_of(args),
            policy.slos,
            out,
            args.baseline,
            request_options(args, THINKTIER_MODEL),
            port=args.port,
            metrics_port=args.metrics_port,
            settings=run_settings(args),
        )
    except ValueError as exc:
        print(f"loadtest compare: {exc}", file=sys.stderr)
        return 2
    if result is None:
        print(f"ran {', '.join(t.name for t in targets)} into {out}; the baseline {args.baseline} has not run there yet: "
              f"run it into the same --out, or `thinktier loadtest compare --summarize {out} --baseline NAME`")
        return 0
    print(f"compared {', '.join(result.targets)} (baseline {result.baseline}); see {out / 'compare.md'}")
    return 0


def add_compare(commands: argparse._SubParsersAction) -> None:
    cmp = commands.add_parser(
        "compare",
        help="start the targets of the comparison matrix in turn and compare them on one workload",
        description="Start each target on this machine, one after the other; run against each, back to back, the "
        "first seed at every --rate, then every --repeat-seeds seed at the middle rate; stop it; and write "
        "compare.md / compare.json with every metric side by side as a ratio to the baseline (taken within a "
        "seed), with the median and range over the seeds, plus TARGET/seed-S/ per target and seed (report, raw "
        "requests, plots). The targets isolate one mechanism each: one-pool (--single-pool-policy: every request one "
        "budget), one-pool-budgets (that pool's tier with --policy's classifier, per-class budgets and priorities, "
        "no chat tier), tiered-no-degradation (--policy, no budget cut, no chat fallback, no shedding, no lending), "
        "tiered-lending (--policy's lending rules, degradation off; only where --policy has them), tiered "
        "(--policy as it ships), ray-serve-llm (Ray Serve LLM on the single pool's tier, each request the budget "
        "--policy's classifier gives it, through vLLM's thinking_token_budget and max_tokens). The first four run "
        "with degradation off; every target's policy is written to OUT/NAME/policy.yaml. The policy's slos judge every "
        "target. Each target takes minutes to start; run it on a quiet machine.",
    )
    cmp.add_argument(
        "--policy",
        default=str(DEFAULT_POLICY),
        help=f"the tiered policy; its slos judge every target (default {DEFAULT_POLICY.name})",
    )
    cmp.add_argument(
        "--set",
        type=policy_setting,
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="change one field of --policy for every target that takes from it (repeatable), e.g. "
        "routing.classifier.artifact=builtin:difficulty-v5",
    )
    cmp.add_argument(
        "--single-pool-policy",
        default=str(SINGLE_POOL_POLICY),
        help="the one pool: its one tier (model, engine, resources) serves one-pool, one-pool-budgets and "
        "ray-serve-llm; give it the total KV cache, batch slots and cores of the tiered policy's tiers "
        "(default policies/examples/single-pool.yaml)",
    )
    cmp.add_argument(
        "--pool-set",
        type=policy_setting,
        action="append",
        default=[],
        metavar="KNOB=VALUE",
        help="change one field of --single-pool-policy (repeatable), e.g. tiers.reasoning.engine.kv_cache_memory_gib=2.25",
    )
    cmp.add_argument(
        "--ray-llm-tier",
        default=None,
        help="tier of --single-pool-policy that Ray Serve LLM copies (default: its routing.reasoning_tier)",
    )
    cmp.add_argument(
        "--ray-llm-cpu-threads",
        default=None,
        help="CPU tiers: cores Ray Serve LLM's engine binds to, e.g. 0-1 (default: the copied tier's engine.cpu_threads)",
    )
    cmp.add_argument("--baseline", default="one-pool", help="target the ratios are relative to (default one-pool)")
    cmp.add_argument(
        "--targets",
        type=_targets,
        default=LINEUP,
        metavar="NAME[,NAME...]",
        help="targets to start (they run in the line-up's order); the report covers every target in --out, those of "
        "earlier runs into the same folder included, so a matrix can be run a target at a time (default: all six; "
        "tiered-lending only where --policy lends)",
    )
    cmp.add_argument(
        "--repeat-seeds",
        type=_seeds,
        default=(),
        metavar="S[,S...]",
        help="more seeds, each run at the middle rate of --rate after the first seed's runs; the report gives the "
        "median and range over all seeds there (default: none)",
    )
    cmp.add_argument(
        "--summarize",
        type=Path,
        default=None,
        metavar="DIR",
        help="start nothing: rebuild DIR/compare.{md,json} and the plot from the raw requests saved there, with "
        "this version's metric definitions",
    )
    cmp.add_argument("--port", type=int, default=8000, help="HTTP port each target serves on (default 8000)")
    cmp.add_argument("--metrics-port", type=int, default=8090, help="Ray metrics export port for Ray Serve LLM (default 8090)")
    add_workload_args(cmp)
    cmp.set_defaults(func=_compare)
