"""`thinktier`: the command line. Each command group lives in its own module with a `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib

# Modules that add subcommands; each exposes register(subparsers) and sets `func` on its parsers.
COMMAND_MODULES = (
    "thinktier.cli.up",
    "thinktier.cli.bench",
    "thinktier.cli.policy",
    "thinktier.cli.loadtest",
    "thinktier.cli.plan",
    "thinktier.cli.helm",
    "thinktier.cli.classifier",
    "thinktier.cli.train",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="thinktier",
        description="thinktier: a Ray Serve multi-tier reasoning cluster behind one OpenAI-compatible endpoint.",
    )
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)
