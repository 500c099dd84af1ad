"""Settings of a training run of the difficulty head (stdlib only, so the CLI can show them without loading torch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from deployments.difficulty_artifact import ARTIFACTS_DIR
from deployments.problems import LANGUAGES

FeatureRecipe = Literal["use-chargrams", "minilm"]


@dataclass(frozen=True)
class TrainingConfig:
    version: str = "difficulty-v3"
    # use-chargrams: multilingual (difficulty-v2, -v3); minilm: the English-only recipe of difficulty-v1, to compare with.
    features: FeatureRecipe = "use-chargrams"
    seed: int = 0
    held_out_fraction: float = 0.2
    languages: tuple[str, ...] = tuple(LANGUAGES)
    max_tokens: int = 128  # minilm: prompts truncated to this many tokens
    int8: bool = True  # minilm: int8 linear layers
    ngram_max: int = 4  # use-chargrams: character n-grams of length 1..ngram_max
    ngram_buckets: int = 8192  # use-chargrams: hashed into this many counts
    # use-chargrams: scale of the n-gram block and of the length feature against the unit-norm embedding. 3 rather than
    # v2's 1 lifted the 5-fold hard-vs-rest AUC (0.917 to 0.926) and its lowest chat recall (0.962 to 1.0).
    ngram_weight: float = 3.0
    length_weight: float = 3.0
    weight_decay: float = 1e-5
    max_iterations: int = 500
    cv_folds: int = 5
    out_dir: Path = ARTIFACTS_DIR
