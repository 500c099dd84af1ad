"""`thinktier bench reasoner`: the reasoning model's behaviours (thinking length, accuracy, budgets, votes)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import get_args

from thinktier.cli.bench_engine import add_tier_arguments, chosen_tier, command_line, device_name, phases_of
from thinktier.loadtest.bench.reasoner.behaviours import PHASES, BehaviourSettings
from thinktier.policies.loader import DEFAULT_POLICY
from thinktier.training.reasoner.sizes import SIZES, SizeName

REASONER_POLICY = DEFAULT_POLICY.parent / "examples" / "reasoner.yaml"
DEFAULTS = BehaviourSettings()


def _pooled(args: argparse.Namespace) -> int:
    from thinktier.loadtest.bench.reasoner.pool import PoolError, pool

    try:
        report = pool([Path(d) for d in args.pool], Path(args.out), command_line())
    except PoolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    for aim in report["aims"]:
        print(f"{'met   ' if aim['met'] else 'MISSED'} {aim['name']}: {aim['measured']}")
    print(f"wrote {args.out}/results.json, README.md and budget_accuracy.png ({report['settings']})")
    return 0


def _reasoner(args: argparse.Namespace) -> int:
    from thinktier.loadtest.bench.reasoner.run import run

    if args.pool:
        return _pooled(args)
    tier = chosen_tier(args)
    if tier is None:
        return 2
    settings = BehaviourSettings(per_class=args.per_class, budget_per_class=args.budget_per_class,
                                 vote_per_class=args.vote_per_class, seed=args.seed, phases=args.phases)
    report = run(tier, SIZES[args.size], settings, Path(args.out), command_line(), device_name())
    for aim in report["aims"]:
        print(f"{'met   ' if aim['met'] else 'MISSED'} {aim['name']}: {aim['measured']}")
    print(f"wrote {args.out}/results.json, README.md and budget_accuracy.png")
    return 0


def add_reasoner(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "reasoner",
        help="the reasoning model's behaviours: thinking length, accuracy, thinking off, budgets, overthinking, votes",
        description="Runs one tier's engine in this process (no Ray) on seeded problems of the reasoner's task family "
        "per difficulty class and measures: thinking tokens and accuracy with full thinking at temperature 0.6, and the "
        "checking after the result was found; accuracy with thinking off; accuracy at each thinking budget (and "
        "whether a cut thinking still answers); a vote of 5 against one sample. Prints each aim as met or missed; "
        "writes results.json, README.md and budget_accuracy.png.",
    )
    add_tier_arguments(p, REASONER_POLICY, "policies/examples/reasoner.yaml")
    p.add_argument("--size", choices=get_args(SizeName), default="small",
                   help="the size whose difficulty classes the problems are drawn from (default small)")
    p.add_argument("--per-class", type=int, default=DEFAULTS.per_class,
                   help=f"problems per class, full and off phases (default {DEFAULTS.per_class})")
    p.add_argument("--budget-per-class", type=int, default=DEFAULTS.budget_per_class,
                   help=f"problems per class and budget (default {DEFAULTS.budget_per_class})")
    p.add_argument("--vote-per-class", type=int, default=DEFAULTS.vote_per_class,
                   help=f"problems per class in the vote phase (default {DEFAULTS.vote_per_class})")
    p.add_argument("--phases", type=phases_of(PHASES), default=PHASES, help=f"comma-separated (default {','.join(PHASES)})")
    p.add_argument("--seed", type=int, default=DEFAULTS.seed, help=f"seed of the problems and samples ({DEFAULTS.seed})")
    p.add_argument("--out", default="loadtest/results/reasoner-small", help="output folder")
    p.add_argument("--pool", nargs="+", metavar="RUN_DIR",
                   help="run no engine: pool the rows of earlier runs of one model (folders this command wrote, other "
                   "seeds) and judge each aim over all of them; the pooled README lists each run's aims beside")
    p.set_defaults(func=_reasoner)
