"""Settings of a training run of the difficulty head (stdlib only, so the CLI can show them without loading torch)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from deployments.difficulty_artifact import ARTIFACTS_DIR
from deployments.problems import LANGUAGES


@dataclass(frozen=True)
class TrainingConfig:
    version: str = "difficulty-v1"
    seed: int = 0
    held_out_fraction: float = 0.2
    languages: tuple[str, ...] = tuple(LANGUAGES)
    max_tokens: int = 128
    int8: bool = True
    weight_decay: float = 1e-4
    max_iterations: int = 500
    out_dir: Path = ARTIFACTS_DIR
