"""Training of the difficulty classifier's head: data, split by problem, fit, held-out report, artifact.

Reproducible: the split and the fit depend only on the seed and the installed data; one command
(`thinktier classifier train`) writes deployments/artifacts/<version>.{json,safetensors}.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version as package_version

import torch
import transformers
from safetensors.torch import save_file
from tqdm import tqdm

from deployments.classifier_config import TrainingConfig
from deployments.difficulty import Embedder, Head, embedder_version
from deployments.difficulty_artifact import (
    HEAD_CLASSES,
    ArtifactManifest,
    ClassReport,
    EmbedderSpec,
    HeadClass,
    HeldOutReport,
    Provenance,
)
from deployments.problems import CHAT_PROMPTS, GSM_PACKAGE, MMATH_PACKAGE, gsm_wheel, load_problems

# Where a prompt of each class should land: inside its effort band for the default thresholds
# (chat < 0.3 <= easy < 0.6 <= medium < 0.8 <= hard), away from the band edges.
SCORE_ANCHORS: dict[HeadClass, float] = {"chat": 0.0, "easy": 0.42, "medium": 0.68, "hard": 1.0}
CHAT_SOURCE = (
    "hand-written no-reasoning prompts in deployments/problems.py CHAT_PROMPT_KINDS (greeting, factual, rewriting, small-talk)"
)
EMBED_CHUNK = 32  # prompts per progress-bar step


@dataclass(frozen=True)
class Example:
    problem_id: str
    text: str
    label: HeadClass
    language: str


def build_examples(languages: Sequence[str]) -> list[Example]:
    """Chat prompts (their own class) and every labelled problem in `languages`."""
    chat = [Example(f"chat:{i}", text, "chat", "en") for i, text in enumerate(CHAT_PROMPTS)]
    problems = [Example(p.id, p.text, p.difficulty, p.language) for p in load_problems(languages)]
    return chat + problems


def split_by_problem(examples: Sequence[Example], fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held_out): `fraction` of each class's problems held out with all their translations."""
    ids: dict[HeadClass, set[str]] = defaultdict(set)
    for example in examples:
        ids[example.label].add(example.problem_id)
    rng = random.Random(seed)
    held: set[str] = set()
    for label in HEAD_CLASSES:
        shuffled = sorted(ids[label])
        rng.shuffle(shuffled)
        held.update(shuffled[: max(1, round(len(shuffled) * fraction))])
    train = [e for e in examples if e.problem_id not in held]
    held_out = [e for e in examples if e.problem_id in held]
    return train, held_out


def embed_all(embedder: Embedder, texts: Sequence[str]) -> torch.Tensor:
    """Features of all texts, with a progress bar."""
    chunks = [texts[i : i + EMBED_CHUNK] for i in range(0, len(texts), EMBED_CHUNK)]
    return torch.cat([embedder.features(chunk) for chunk in tqdm(chunks, desc="embedding", unit="chunk")])


def fit_head(features: torch.Tensor, labels: torch.Tensor, weight_decay: float, max_iterations: int) -> Head:
    """Class-balanced multinomial logistic regression with an L2 penalty, solved by L-BFGS from zeros (deterministic)."""
    weight = torch.zeros(len(HEAD_CLASSES), features.shape[1], requires_grad=True)
    bias = torch.zeros(len(HEAD_CLASSES), requires_grad=True)
    counts = torch.bincount(labels, minlength=len(HEAD_CLASSES)).float()
    class_weight = counts.sum() / (len(HEAD_CLASSES) * counts)
    optimizer = torch.optim.LBFGS([weight, bias], max_iter=max_iterations, line_search_fn="strong_wolfe")

    def loss() -> torch.Tensor:
        optimizer.zero_grad()
        logits = features @ weight.T + bias
        value = torch.nn.functional.cross_entropy(logits, labels, weight=class_weight) + weight_decay * weight.square().sum()
        value.backward()
        return value

    optimizer.step(loss)
    return Head(weight=weight.detach().clone(), bias=bias.detach().clone())


def roc_auc(scores: Sequence[float], positive: Sequence[bool]) -> float:
    """Probability that a random positive scores above a random negative (ties count half)."""
    pos = [s for s, p in zip(scores, positive, strict=True) if p]
    neg = [s for s, p in zip(scores, positive, strict=True) if not p]
    if not pos or not neg:
        return float("nan")
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def report(labels: torch.Tensor, probabilities: torch.Tensor, scores: torch.Tensor) -> HeldOutReport:
    predicted = probabilities.argmax(dim=-1)
    per_class: dict[HeadClass, ClassReport] = {}
    mean_score: dict[HeadClass, float] = {}
    for index, label in enumerate(HEAD_CLASSES):
        rows = labels == index
        support = int(rows.sum())
        recall = float((predicted[rows] == index).float().mean()) if support else float("nan")
        per_class[label] = ClassReport(recall=round(recall, 4), support=support)
        mean_score[label] = round(float(scores[rows].mean()), 4) if support else float("nan")
    hard = HEAD_CLASSES.index("hard")
    return HeldOutReport(
        rows=len(labels),
        accuracy=round(float((predicted == labels).float().mean()), 4),
        per_class=per_class,
        hard_vs_rest_roc_auc=round(roc_auc(scores.tolist(), (labels == hard).tolist()), 4),
        mean_score=mean_score,
    )


def best_cut(scores: torch.Tensor, above: torch.Tensor) -> float:
    """The threshold that maximises balanced accuracy of `score >= threshold` for predicting `above` (Youden's J)."""
    candidates = sorted(set(scores.tolist()))
    best, best_j = 0.5, -1.0
    for low, high in itertools.pairwise(candidates):
        cut = (low + high) / 2
        predicted = scores >= cut
        j = float(predicted[above].float().mean()) + float((~predicted[~above]).float().mean()) - 1
        if j > best_j:
            best, best_j = cut, j
    return round(best, 3)


def suggested_thresholds(labels: torch.Tensor, scores: torch.Tensor) -> dict[str, float]:
    """Cut points for the policy's thresholds: reasoning (chat | rest), medium (.. easy | medium ..), high (.. | hard)."""
    index = {label: i for i, label in enumerate(HEAD_CLASSES)}
    return {
        "reasoning": best_cut(scores, labels >= index["easy"]),
        "medium": best_cut(scores, labels >= index["medium"]),
        "high": best_cut(scores, labels >= index["hard"]),
    }


def train(config: TrainingConfig, log: Callable[[str], None] = print) -> ArtifactManifest:
    """Train, evaluate on the held-out split and write the artifact. Returns its manifest."""
    torch.manual_seed(config.seed)
    examples = build_examples(config.languages)
    train_set, held_out = split_by_problem(examples, config.held_out_fraction, config.seed)
    log(f"{len(examples)} rows: {len(train_set)} train, {len(held_out)} held out (split by problem, seed {config.seed})")

    embedder = Embedder(config.max_tokens, config.int8)
    train_x = embed_all(embedder, [e.text for e in train_set])
    held_x = embed_all(embedder, [e.text for e in held_out])
    train_y = torch.tensor([HEAD_CLASSES.index(e.label) for e in train_set])
    held_y = torch.tensor([HEAD_CLASSES.index(e.label) for e in held_out])

    head = fit_head(train_x, train_y, config.weight_decay, config.max_iterations)
    anchors = torch.tensor([SCORE_ANCHORS[c] for c in HEAD_CLASSES])
    probabilities = head.probabilities(held_x)
    scores = probabilities @ anchors
    english = torch.tensor([e.language == "en" for e in held_out])
    held_out_reports = {
        "all": report(held_y, probabilities, scores),
        "en": report(held_y[english], probabilities[english], scores[english]),
    }

    held_ids: dict[HeadClass, list[str]] = {c: sorted({e.problem_id for e in held_out if e.label == c}) for c in HEAD_CLASSES}
    train_ids: dict[HeadClass, int] = {c: len({e.problem_id for e in train_set if e.label == c}) for c in HEAD_CLASSES}
    manifest = ArtifactManifest(
        version=config.version,
        score_anchors=SCORE_ANCHORS,
        embedder=EmbedderSpec(package_version=embedder_version(), max_tokens=config.max_tokens, int8=config.int8),
        held_out=held_out_reports,
        suggested_thresholds=suggested_thresholds(held_y, scores),
        provenance=Provenance(
            seed=config.seed,
            held_out_fraction=config.held_out_fraction,
            languages=list(config.languages),
            train_rows=len(train_set),
            train_problems=train_ids,
            held_out_problems=held_ids,
            data_packages={MMATH_PACKAGE: package_version(MMATH_PACKAGE), GSM_PACKAGE: gsm_wheel().name},
            chat_prompts=CHAT_SOURCE,
            torch_version=torch.__version__,
            transformers_version=transformers.__version__,
            max_iterations=config.max_iterations,
            weight_decay=config.weight_decay,
        ),
    )
    config.out_dir.mkdir(parents=True, exist_ok=True)
    save_file(
        {"weight": head.weight.contiguous(), "bias": head.bias.contiguous()}, config.out_dir / f"{config.version}.safetensors"
    )
    (config.out_dir / f"{config.version}.json").write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return manifest
