"""`thinktier bench economy`: self-consistency prefill sharing, voting accuracy, early consensus and certainty exit on one
engine."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from thinktier.cli.args import policy_setting
from thinktier.loadtest.bench.economy_bench import PHASES, EconomySettings
from thinktier.loadtest.bench.economy_prompts import TASKS
from thinktier.policies.loader import DEFAULT_POLICY, PolicyError, load_policy_with

DEFAULTS = EconomySettings()


def device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"CPU, {os.cpu_count()} cores"


def _phases(text: str) -> str:
    unknown = sorted(set(text.split(",")) - set(PHASES))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown phases {unknown}; choose from {','.join(PHASES)}")
    return text


def _economy(args: argparse.Namespace) -> int:
    from thinktier.loadtest.bench.economy_bench import run

    try:
        policy = load_policy_with(args.policy, args.set)
    except (PolicyError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.tier not in policy.tiers:
        print(f"error: the policy has no tier {args.tier!r}; it has {sorted(policy.tiers)}", file=sys.stderr)
        return 2
    settings = EconomySettings(
        task=args.task, prompts=args.prompts, samples=args.samples, consensus=args.consensus, temperature=args.temperature,
        thinking_tokens=args.thinking_tokens, answer_tokens=args.answer_tokens, interval_tokens=args.interval_tokens,
        agree=args.agree, seed=args.seed, phases=tuple(args.phases.split(",")),
    )
    overrides = {"load_format": "dummy"} if args.dummy_weights else {}
    report = run((args.tier, policy.tiers[args.tier]), settings, Path(args.out), " ".join(["thinktier", *sys.argv[1:]]),
                 device_name(), overrides)
    prefill = report["summary"].get("prefill_x_one_sample_median")
    if prefill:
        print(f"prefill of {args.samples} samples: {prefill['shared']:.2f}x one sample shared, "
              f"{prefill['separate']:.2f}x separate")
    for aim in report["aims"]:
        verdict = {True: "met", False: "MISSED", None: "not measured"}[aim["met"]]
        print(f"{aim['name']}: {aim['measured']} [{verdict}; aim: {aim['target']}]")
    print(f"wrote {args.out}/results.json and {args.out}/results.md")
    return 0


def add_economy(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "economy",
        help="self-consistency prefill sharing, voting accuracy, early consensus and certainty exit, each against a baseline",
        description="Runs one tier's engine in this process (no Ray) over generated easy arithmetic prompts with a "
        "few-shot system prompt, or the reasoner's chained-addition problems per difficulty class (--task), and "
        "measures: prompt tokens computed for N samples sent together vs N separate requests; the accuracy of a "
        "majority vote of the first n of N samples, n = 1..N, per class; tokens and accuracy of N samples with and "
        "without early consensus, with the share of prompts whose voted answer stays the same; thinking tokens and "
        "accuracy with and without certainty exit, likewise; and whether the issue's aims are met. Writes results.json "
        "and results.md.",
    )
    p.add_argument("--policy", default=str(DEFAULT_POLICY), help="policy file (default: the embedded default, SmolLM2)")
    p.add_argument("--set", action="append", type=policy_setting, default=[], metavar="KNOB=VALUE",
                   help="change a policy field for this run, e.g. tiers.reasoning.engine.cpu_threads=0-1 (repeatable)")
    p.add_argument("--tier", default="reasoning", help="tier whose engine is measured (default: reasoning)")
    p.add_argument("--task", choices=TASKS, default=DEFAULTS.task,
                   help="prompt source: easy arithmetic after a few-shot block (the demo model), or the reasoner's "
                   f"seeded chained-addition problems, a third per class easy/medium/hard (default {DEFAULTS.task})")
    p.add_argument("--prompts", type=int, default=DEFAULTS.prompts,
                   help=f"prompts in all (default {DEFAULTS.prompts}; reasoner: a third per class)")
    p.add_argument("--samples", type=int, default=DEFAULTS.samples, help=f"samples N (default {DEFAULTS.samples})")
    p.add_argument("--consensus", type=int, default=DEFAULTS.consensus,
                   help=f"agreeing samples that stop the rest (default {DEFAULTS.consensus})")
    p.add_argument("--temperature", type=float, default=DEFAULTS.temperature,
                   help=f"sampling temperature of the samples (default {DEFAULTS.temperature}); certainty exit decodes "
                   "greedily on arithmetic, at this temperature with one seed on reasoner")
    p.add_argument("--thinking-tokens", type=int, default=DEFAULTS.thinking_tokens,
                   help=f"thinking budget (default {DEFAULTS.thinking_tokens})")
    p.add_argument("--answer-tokens", type=int, default=DEFAULTS.answer_tokens,
                   help=f"answer budget (default {DEFAULTS.answer_tokens})")
    p.add_argument("--interval-tokens", type=int, default=DEFAULTS.interval_tokens,
                   help=f"thinking tokens between certainty probes (default {DEFAULTS.interval_tokens})")
    p.add_argument("--agree", type=int, default=DEFAULTS.agree,
                   help=f"agreeing probes that end the thinking (default {DEFAULTS.agree})")
    p.add_argument("--seed", type=int, default=DEFAULTS.seed, help=f"prompt and sampling seed (default {DEFAULTS.seed})")
    p.add_argument("--phases", default=",".join(PHASES), type=_phases,
                   help=f"measurements to run, comma-separated (default {','.join(PHASES)}; dummy weights: prefill only)")
    p.add_argument("--dummy-weights", action="store_true",
                   help="random weights of the model's geometry (GPU runs of a model folder holding only its config)")
    p.add_argument("--out", default="loadtest/results/economy", help="output folder (default loadtest/results/economy)")
    p.set_defaults(func=_economy)
