"""`thinktier train reasoner`: train the project's own reasoning model (training/reasoner/) from scratch, seeded."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import get_args

from thinktier.deployments.tier.models import trained_model_dir
from thinktier.training.reasoner.sizes import SIZES, SizeName


def _train(args: argparse.Namespace) -> int:
    from thinktier.training.reasoner.train import TrainingOptions, train

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    size = SIZES[args.size]
    out = args.out or trained_model_dir(f"reasoner-{args.size}")
    record = train(size, out, TrainingOptions(seed=args.seed, steps=args.steps, device=args.device, max_minutes=args.max_minutes,
                                                  init_from=args.init_from, learning_rate=args.learning_rate))
    print(f"trained reasoner-{args.size} in {record['seconds']:.0f} s ({record['tokens']:,} tokens, final loss "
          f"{record['final_loss']:.3f}); saved in {out}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("train", help="Train the models thinktier builds itself.",
                                   description="Train the models thinktier builds itself (no model hub is reachable).")
    commands = parser.add_subparsers(title="models", metavar="MODEL", required=True)
    reasoner = commands.add_parser(
        "reasoner",
        help="Train the reasoning model (builtin:reasoner-small / builtin:reasoner-large) from scratch.",
        description="Train a Llama decoder with its own tokenizer from scratch on the chained-addition task family "
        "(training/reasoner/tasks.py): step-by-step thinking inside <think>...</think>, a check of its own work, "
        "answers in the prompt's language, chat turns, and the shapes serving gives a thinking section (cut by a "
        "budget, probed by certainty exit, turned off). Seeded: the same seed and steps give the same model on one "
        "machine. Logs loss, tokens per second and time left as it goes. The small size takes about 20 minutes on two "
        "CPU cores; the large one wants a GPU (--device cuda).",
    )
    reasoner.add_argument("--size", choices=get_args(SizeName), default="small", help="model size (default small)")
    reasoner.add_argument("--seed", type=int, default=0, help="seed of the data, the tokenizer and the weights (0)")
    reasoner.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the size's)")
    reasoner.add_argument("--max-minutes", type=float, default=None,
                          help="stop after this many minutes, with the learning rate annealed by then (default: none)")
    reasoner.add_argument("--init-from", type=Path, default=None,
                          help="continue training this saved model folder instead of starting from scratch")
    reasoner.add_argument("--learning-rate", type=float, default=None, help="peak learning rate (default: the size's)")
    reasoner.add_argument("--device", default="cpu", help="torch device: cpu, or cuda on a GPU machine (default cpu)")
    reasoner.add_argument("--out", type=Path, default=None,
                          help="where the model folder goes (default: where builtin:reasoner-<size> is loaded from: "
                          "the package's artifact for small, the cache for large)")
    reasoner.set_defaults(func=_train)
