"""What the benchmarks that run one tier's engine in this process share: the tier chosen by --policy, --set and
--tier, a --phases list, and the device named in the report."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from thinktier.cli.args import policy_setting
from thinktier.policies.loader import PolicyError, load_policy_with
from thinktier.policies.schema import Tier


def add_tier_arguments(p: argparse.ArgumentParser, default_policy: Path, policy_help: str) -> None:
    p.add_argument("--policy", default=str(default_policy), help=f"policy file (default: {policy_help})")
    p.add_argument("--set", action="append", type=policy_setting, default=[], metavar="KNOB=VALUE",
                   help="change a policy field for this run, e.g. tiers.reasoning.engine.cpu_threads=0-1 (repeatable)")
    p.add_argument("--tier", default="reasoning", help="tier whose engine is measured (default: reasoning)")


def chosen_tier(args: argparse.Namespace) -> tuple[str, Tier] | None:
    """The tier named by --tier in --policy with --set applied; None after saying on stderr why there is none."""
    try:
        policy = load_policy_with(args.policy, args.set)
    except (PolicyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    if args.tier not in policy.tiers:
        print(f"error: the policy has no tier {args.tier!r}; it has {sorted(policy.tiers)}", file=sys.stderr)
        return None
    return args.tier, policy.tiers[args.tier]


def phases_of(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """The argument type of --phases: a comma-separated subset of `choices`."""

    def parse(text: str) -> tuple[str, ...]:
        chosen = tuple(text.split(","))
        unknown = sorted(set(chosen) - set(choices))
        if unknown:
            raise argparse.ArgumentTypeError(f"unknown phases {unknown}; choose from {','.join(choices)}")
        return chosen

    return parse


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU, {os.cpu_count()} cores"


def command_line() -> str:
    return " ".join(["thinktier", *sys.argv[1:]])
