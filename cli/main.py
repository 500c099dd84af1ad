"""`thinktier`: the command line. Each command group lives in its own module with a `register(subparsers)`.

Building the parser imports every command module, so none of them imports Ray at module level: a command that needs
it imports it when it runs. The GPU machine's benches (`thinktier bench gpu`, `bench economy`) run where Ray is not
installed (tests/test_cli_without_ray.py)."""

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
