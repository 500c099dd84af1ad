"""`thinktier bench economy`: self-consistency prefill sharing, voting accuracy, early consensus and certainty exit on one
engine."""

from __future__ import annotations

import argparse
from pathlib import Path

from thinktier.cli.bench_engine import add_tier_arguments, chosen_tier, command_line, device_name, phases_of
from thinktier.loadtest.bench.economy_bench import PHASES, EconomySettings
from thinktier.loadtest.bench.economy_prompts import TASKS
from thinktier.policies.loader import DEFAULT_POLICY

DEFAULTS = EconomySettings()


def _economy(args: argparse.Namespace) -> int:
    from thinktier.loadtest.bench.economy_bench import run

    tier = chosen_tier(args)
    if tier is None:
        return 2
    settings = EconomySettings(
        task=args.task, prompts=args.prompts, samples=args.samples, consensus=args.consensus, temperature=args.temperature,
        thinking_tokens=args.thinking_tokens, answer_tokens=args.answer_tokens, interval_tokens=args.interval_tokens,
        agree=args.agree, seed=args.seed, phases=args.phases,
    )
    overrides = {"load_format": "dummy"} if args.dummy_weights else {}
    report = run(tier, settings, Path(args.out), command_line(), device_name(), overrides)
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
    add_tier_arguments(p, DEFAULT_POLICY, "the embedded default, SmolLM2")
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
    p.add_argument("--phases", default=",".join(PHASES), type=phases_of(PHASES),
                   help=f"measurements to run, comma-separated (default {','.join(PHASES)}; dummy weights: prefill only)")
    p.add_argument("--dummy-weights", action="store_true",
                   help="random weights of the model's geometry (GPU runs of a model folder holding only its config)")
    p.add_argument("--out", default="loadtest/results/economy", help="output folder (default loadtest/results/economy)")
    p.set_defaults(func=_economy)
