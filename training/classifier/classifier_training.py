"""Training of the difficulty classifier's head: data, split by problem, fit, held-out report, artifact.

Reproducible: the split and the fit depend only on the seed and the installed data; one command
(`thinktier classifier train`) writes deployments/classifier/artifacts/<version>.{json,safetensors}. Recipes are compared by
`select_by_cross_validation` (`thinktier classifier cv`), which sees the training problems only, never the held-out
split that the artifact reports.
"""

from __future__ import annotations

import itertools
import random
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
import transformers
from safetensors.torch import save_file
from tqdm import tqdm

from thinktier.deployments.classifier.difficulty import (
    USE_DIM,
    Features,
    Head,
    UseCharGrams,
    fold_scores,
    make_features,
    package_version,
)
from thinktier.deployments.classifier.difficulty_artifact import (
    HEAD_CLASSES,
    MINILM_PACKAGE,
    USE_PACKAGE,
    ArtifactManifest,
    ClassReport,
    CrossValidation,
    EmbedderSpec,
    HeadClass,
    HeldOutReport,
    MiniLMSpec,
    Provenance,
    UseCharGramsSpec,
)
from thinktier.deployments.classifier.difficulty_structure import standardiser
from thinktier.policies.schema import Thresholds
from thinktier.training.classifier.classifier_config import TrainingConfig
from thinktier.training.classifier.fast_head import choose_confidence
from thinktier.training.classifier.hard_risk import choose_hard_risk, hard_rows_in_chat
from thinktier.training.data.chat_prompts import chat_prompts
from thinktier.training.data.external_problems import MATH500_PACKAGE
from thinktier.training.data.math_levels import math_level_problems
from thinktier.training.data.plain_math import plain_text
from thinktier.training.data.problems import GSM_PACKAGE, MMATH_PACKAGE, gsm_wheel, load_problems
from thinktier.training.data.reasoner_prompts import reasoner_prompts
from thinktier.training.data.written_prompts import second_batch, written_prompts

# Where a prompt of each class should land: inside its effort band for the default thresholds
# (chat < 0.3 <= easy < 0.6 <= medium < 0.8 <= hard), away from the band edges.
SCORE_ANCHORS: dict[HeadClass, float] = {"chat": 0.0, "easy": 0.42, "medium": 0.68, "hard": 1.0}
CHAT_SOURCE = (
    "hand-written no-reasoning prompts in each language, training/data/chat_prompts.json "
    "(greeting, factual, rewriting, small-talk)"
)
EMBED_CHUNK = 32  # prompts per progress-bar step
ANCHORS = torch.tensor([SCORE_ANCHORS[c] for c in HEAD_CLASSES])


@dataclass(frozen=True)
class Example:
    problem_id: str
    text: str
    label: HeadClass
    language: str


def build_examples(
    languages: Sequence[str],
    written: bool = False,
    math_per_level: int = 0,
    written_2: bool = False,
    reasoner_per_class: int = 0,
) -> list[Example]:
    """Chat prompts (their own class) and every labelled problem in `languages`; with `written`, the hand-written long
    chat, terse hard and code prompts of those languages (training/data/written_prompts.py); with `math_per_level`, that
    many of MATH's training problems per level, graded by it (training/data/math_levels.py; English); with `written_2`,
    the second hand-written batch, in those languages and German, Russian and Hindi; with `reasoner_per_class`, that many
    of the reasoner's problems per class and language, labelled by the thinking they need
    (training/data/reasoner_prompts.py; English, Spanish and French)."""
    chat = [Example(c.id, c.text, "chat", c.language) for c in chat_prompts(languages)]
    problems = [Example(p.id, p.text, p.difficulty, p.language) for p in load_problems(languages)]
    extra = [Example(w.id, w.text, w.label, w.language) for w in written_prompts(languages)] if written else []
    if math_per_level > 0 and "en" in languages:
        extra += [Example(pid, text, label, "en") for pid, text, label in math_level_problems(math_per_level)]
    if written_2:
        extra += [Example(w.id, w.text, w.label, w.language) for w in second_batch(languages)]
    extra += [Example(r.id, r.text, r.label, r.language) for r in reasoner_prompts(reasoner_per_class)]
    return chat + problems + extra


def examples_of(config: TrainingConfig) -> list[Example]:
    """The rows the recipe of `config` trains and is evaluated on."""
    return build_examples(
        config.languages, config.written_prompts, config.math_per_level, config.written_prompts_2, config.reasoner_per_class
    )


def provenance_examples(provenance: Provenance) -> list[Example]:
    """The rows an artifact was trained and evaluated on, rebuilt from its manifest."""
    return build_examples(
        provenance.languages,
        provenance.written_prompts,
        provenance.math_per_level,
        provenance.written_prompts_2,
        provenance.reasoner_per_class,
    )


# Id prefixes of the rows added for issue 33, stratified after the rest in this order (difficulty-v6's two first, so
# difficulty-v7's sources never move v6's split).
EXTRA_SOURCES = ("MATH-train:", "written:", "written-2:", "reasoner:")


def sources_used(provenance: Provenance) -> dict[str, bool]:
    """Which of EXTRA_SOURCES an artifact was fitted on."""
    return {
        "MATH-train:": provenance.math_per_level > 0,
        "written:": provenance.written_prompts,
        "written-2:": provenance.written_prompts_2,
        "reasoner:": provenance.reasoner_per_class > 0,
    }


def strata(examples: Sequence[Example]) -> list[list[str]]:
    """Problem ids by stratum, each sorted: English chat prompts, easy, medium and hard problems (a problem with all its
    translations), then each other language's chat prompts, then the added sources (EXTRA_SOURCES) by source, class and
    language. Chat prompts are stratified by language so every language has its share in each split; in this order,
    adding a language's chat prompts or an added source never moves the problems' split."""
    ids: dict[tuple[HeadClass, str], set[str]] = defaultdict(set)
    extra: dict[tuple[int, HeadClass, str], set[str]] = defaultdict(set)
    for e in examples:
        source = next((i for i, prefix in enumerate(EXTRA_SOURCES) if e.problem_id.startswith(prefix)), None)
        if source is not None:
            extra[(source, e.label, e.language)].add(e.problem_id)
        else:
            ids[(e.label, e.language if e.label == "chat" else "")].add(e.problem_id)
    chat_languages = sorted({language for label, language in ids if label == "chat"}, key=lambda lang: (lang != "en", lang))
    order: list[tuple[HeadClass, str]] = [("chat", lang) for lang in chat_languages[:1] if lang == "en"]
    order += [(label, "") for label in HEAD_CLASSES if label != "chat"]
    order += [("chat", lang) for lang in chat_languages if lang != "en"]
    return [sorted(ids[key]) for key in order if ids[key]] + [sorted(extra[key]) for key in sorted(extra)]


def split_by_problem(examples: Sequence[Example], fraction: float, seed: int) -> tuple[list[Example], list[Example]]:
    """(train, held_out): `fraction` of each stratum's problems held out with all their translations."""
    rng = random.Random(seed)
    held: set[str] = set()
    for ids in strata(examples):
        rng.shuffle(ids)
        held.update(ids[: max(1, round(len(ids) * fraction))])
    train = [e for e in examples if e.problem_id not in held]
    held_out = [e for e in examples if e.problem_id in held]
    return train, held_out


def folds(examples: Sequence[Example], k: int, seed: int) -> list[set[str]]:
    """`k` disjoint sets of problem ids covering all of them, each stratum dealt out evenly."""
    rng = random.Random(seed)
    out: list[set[str]] = [set() for _ in range(k)]
    for ids in strata(examples):
        rng.shuffle(ids)
        for i, problem_id in enumerate(ids):
            out[i % k].add(problem_id)
    return out


def embed_all(embedder: Features, texts: Sequence[str]) -> torch.Tensor:
    """Features of all texts, with a progress bar."""
    chunks = [texts[i : i + EMBED_CHUNK] for i in range(0, len(texts), EMBED_CHUNK)]
    return torch.cat([embedder.features(chunk) for chunk in tqdm(chunks, desc="embedding", unit="chunk")])


def plain_features(embedder: Features, texts: Sequence[str], features: torch.Tensor) -> torch.Tensor:
    """Features of `texts` rendered without LaTeX (training/data/plain_math.py), beside `features` of them as written:
    rows whose text holds no LaTeX are copied, the rest embedded again."""
    plain = [plain_text(text) for text in texts]
    changed = [i for i, (text, rendered) in enumerate(zip(texts, plain, strict=True)) if rendered != text]
    out = features.clone()
    if changed:
        out[changed] = embed_all(embedder, [plain[i] for i in changed])
    return out


def fitting_rows(
    features: torch.Tensor, plain: torch.Tensor, labels: torch.Tensor, plain_renderings: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """What the head is fitted on: each row as written and, with `plain_renderings`, also without LaTeX."""
    if not plain_renderings:
        return features, labels
    return torch.cat([features, plain]), torch.cat([labels, labels])


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


def chat_recall(labels: torch.Tensor, scores: torch.Tensor) -> float:
    """Share of chat rows the default policy sends to the chat tier (score below its reasoning threshold)."""
    chat = labels == HEAD_CLASSES.index("chat")
    return float((scores[chat] < Thresholds().reasoning).float().mean()) if bool(chat.any()) else float("nan")


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
        chat_recall=round(chat_recall(labels, scores), 4),
    )


PLAIN_PREFIX = "plain:"  # slices of the rows rendered without LaTeX (training/data/plain_math.py)
PLAIN_SLICES = ("all", "en")  # which slices are also reported so rendered


def slices(languages: Sequence[str], row_languages: Sequence[str]) -> dict[str, torch.Tensor]:
    """Row masks: 'all', then one per language."""
    return {"all": torch.ones(len(row_languages), dtype=torch.bool)} | {
        language: torch.tensor([lang == language for lang in row_languages]) for language in languages
    }


def rendered_slices(languages: Sequence[str], row_languages: Sequence[str]) -> dict[str, tuple[torch.Tensor, bool]]:
    """(row mask, whether the rows are rendered without LaTeX) per reported slice: every slice of the rows as written,
    then PLAIN_SLICES without LaTeX."""
    masks = slices(languages, row_languages)
    return {name: (mask, False) for name, mask in masks.items()} | {
        PLAIN_PREFIX + name: (masks[name], True) for name in PLAIN_SLICES if name in masks
    }


def cross_validate(
    config: TrainingConfig,
    examples: Sequence[Example],
    features: torch.Tensor,
    plain: torch.Tensor,
    labels: torch.Tensor,
    log: Callable[[str], None],
    fold_seed: int | None = None,
    hard_risk: float | None = None,
) -> CrossValidation:
    """Fit the head `config.cv_folds` times, each fold held out once, on features already computed for every row, as
    written and without LaTeX (`plain`), scored under the uncertainty rule with `hard_risk`. The folds are dealt by
    `fold_seed` (default: the config's seed)."""
    reported = rendered_slices(config.languages, [e.language for e in examples])
    auc: dict[str, list[float]] = defaultdict(list)
    recall: dict[str, list[float]] = defaultdict(list)
    seed = config.seed if fold_seed is None else fold_seed
    for i, fold in enumerate(folds(examples, config.cv_folds, seed)):
        held = torch.tensor([e.problem_id in fold for e in examples])
        fit_x, fit_y = fitting_rows(features[~held], plain[~held], labels[~held], config.plain_renderings)
        head = fit_head(fit_x, fit_y, config.weight_decay, config.max_iterations)
        held_labels = labels[held]
        held_scores = {
            typed: fold_scores(head.probabilities(x[held]), ANCHORS, config.chat_confidence, hard_risk)
            for typed, x in ((False, features), (True, plain))
        }
        for name, (mask, typed) in reported.items():
            rows = mask[held]
            scores = held_scores[typed][rows]
            hard = (held_labels[rows] == HEAD_CLASSES.index("hard")).tolist()
            auc[name].append(round(roc_auc(scores.tolist(), hard), 4))
            recall[name].append(round(chat_recall(held_labels[rows], scores), 4))
        log(f"fold {i + 1}/{config.cv_folds}: hard-vs-rest ROC AUC {auc['all'][-1]:.3f}, chat recall {recall['all'][-1]:.3f}")
    return CrossValidation(folds=config.cv_folds, hard_vs_rest_roc_auc=dict(auc), chat_recall=dict(recall))


def out_of_fold(
    config: TrainingConfig, examples: Sequence[Example], features: torch.Tensor, plain: torch.Tensor, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Whole-head and fast-head probabilities of every row, as written then without LaTeX (stacked), each from the fit
    of the folds without it (the fast head leaves the embedding's columns out)."""
    both = torch.cat([features, plain])
    whole, fast = torch.zeros(len(both), len(HEAD_CLASSES)), torch.zeros(len(both), len(HEAD_CLASSES))
    for fold in folds(examples, config.cv_folds, config.seed):
        held = torch.tensor([e.problem_id in fold for e in examples])
        fit_x, fit_y = fitting_rows(features[~held], plain[~held], labels[~held], config.plain_renderings)
        rows = torch.cat([held, held])
        whole[rows] = fit_head(fit_x, fit_y, config.weight_decay, config.max_iterations).probabilities(both[rows])
        fast_head = fit_head(fit_x[:, USE_DIM:], fit_y, config.weight_decay, config.max_iterations)
        fast[rows] = fast_head.probabilities(both[rows][:, USE_DIM:])
    return whole, fast


def embedder_spec(config: TrainingConfig, train_texts: Sequence[str]) -> EmbedderSpec:
    """The feature recipe of `config`; a structure block is standardised by the training rows' statistics."""
    if config.features == "minilm":
        return MiniLMSpec(package_version=package_version(MINILM_PACKAGE), max_tokens=config.max_tokens, int8=config.int8)
    spec = UseCharGramsSpec(
        package_version=package_version(USE_PACKAGE),
        ngram_max=config.ngram_max,
        ngram_buckets=config.ngram_buckets,
        ngram_weight=config.ngram_weight,
        length_weight=config.length_weight,
    )
    if config.structure_weight <= 0:
        return spec
    probe = UseCharGrams(spec)  # for its tokenizer; the encoder's weights load only on the first embedding
    mean, scale = standardiser(np.stack([probe.raw_structure(text) for text in train_texts]))
    return spec.model_copy(update={"structure_weight": config.structure_weight, "structure_mean": mean, "structure_scale": scale})


def select_by_cross_validation(
    config: TrainingConfig, fold_seeds: Sequence[int], log: Callable[[str], None] = print
) -> dict[str, tuple[float, float, float]]:
    """Cross-validate the recipe of `config` on its TRAINING problems only (the held-out split is neither featurised
    nor fitted), `config.cv_folds` folds per fold seed. Returns per slice ('all', each language) the AUC mean and
    minimum over every fold and the lowest chat recall: the figures recipes are chosen by, before the held-out report."""
    train_set, _ = split_by_problem(examples_of(config), config.held_out_fraction, config.seed)
    texts = [e.text for e in train_set]
    embedder = make_features(embedder_spec(config, texts))
    features = embed_all(embedder, texts)
    plain = plain_features(embedder, texts, features)
    labels = torch.tensor([HEAD_CLASSES.index(e.label) for e in train_set])
    auc: dict[str, list[float]] = defaultdict(list)
    recall: dict[str, list[float]] = defaultdict(list)
    for fold_seed in fold_seeds:
        cv = cross_validate(config, train_set, features, plain, labels, log, fold_seed)
        for name, values in cv.hard_vs_rest_roc_auc.items():
            auc[name] += values
            recall[name] += cv.chat_recall[name]
    return {name: (sum(v) / len(v), min(v), min(recall[name])) for name, v in auc.items()}


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
    examples = examples_of(config)
    train_set, held_out = split_by_problem(examples, config.held_out_fraction, config.seed)
    held_set = {e.problem_id for e in held_out}
    log(f"{len(examples)} rows: {len(train_set)} train, {len(held_out)} held out (split by problem, seed {config.seed})")

    spec = embedder_spec(config, [e.text for e in train_set])
    embedder = make_features(spec)
    texts = [e.text for e in examples]
    all_x = embed_all(embedder, texts)
    all_plain = plain_features(embedder, texts, all_x)
    all_y = torch.tensor([HEAD_CLASSES.index(e.label) for e in examples])
    held_rows = torch.tensor([e.problem_id in held_set for e in examples])
    held_y = all_y[held_rows]

    fit_x, fit_y = fitting_rows(all_x[~held_rows], all_plain[~held_rows], all_y[~held_rows], config.plain_renderings)
    head = fit_head(fit_x, fit_y, config.weight_decay, config.max_iterations)
    hard_risk, fast_spec = None, None
    if (config.hard_risk or config.fast_agreement is not None) and isinstance(spec, UseCharGramsSpec):
        train_rows = ~held_rows
        whole, fast = out_of_fold(config, train_set, all_x[train_rows], all_plain[train_rows], all_y[train_rows])
        if config.hard_risk:
            oof_labels = all_y[train_rows].repeat(2)  # out_of_fold stacks the rows as written, then without LaTeX
            hard_risk = choose_hard_risk(whole, oof_labels, ANCHORS, config.chat_confidence)
            before = hard_rows_in_chat(whole, oof_labels, ANCHORS, config.chat_confidence, None)
            after = hard_rows_in_chat(whole, oof_labels, ANCHORS, config.chat_confidence, hard_risk)
            log(f"hard risk: {hard_risk} (training rows out of fold: hard rows in the chat band {before} -> {after})")
        if config.fast_agreement is not None:
            fast_spec = choose_confidence(whole, fast, ANCHORS, config.chat_confidence, config.fast_agreement, hard_risk)
            log(f"fast head: {fast_spec or 'no confidence met the agreement; every prompt is embedded'}")
    held_probabilities = {typed: head.probabilities(x[held_rows]) for typed, x in ((False, all_x), (True, all_plain))}
    held_out_reports: dict[str, HeldOutReport] = {}
    held_languages = [e.language for e in examples if e.problem_id in held_set]
    for name, (mask, typed) in rendered_slices(config.languages, held_languages).items():
        probabilities = held_probabilities[typed][mask]
        held_scores = fold_scores(probabilities, ANCHORS, config.chat_confidence, hard_risk)
        held_out_reports[name] = report(held_y[mask], probabilities, held_scores)
    scores = fold_scores(held_probabilities[False], ANCHORS, config.chat_confidence, hard_risk)
    cross_validation = (
        cross_validate(config, examples, all_x, all_plain, all_y, log, hard_risk=hard_risk) if config.cv_folds > 1 else None
    )
    tensors = {"weight": head.weight.contiguous(), "bias": head.bias.contiguous()}
    if fast_spec is not None:
        fast_head = fit_head(fit_x[:, USE_DIM:], fit_y, config.weight_decay, config.max_iterations)
        tensors |= {"fast_weight": fast_head.weight.contiguous(), "fast_bias": fast_head.bias.contiguous()}

    held_ids: dict[HeadClass, list[str]] = {c: sorted({e.problem_id for e in held_out if e.label == c}) for c in HEAD_CLASSES}
    train_ids: dict[HeadClass, int] = {c: len({e.problem_id for e in train_set if e.label == c}) for c in HEAD_CLASSES}
    manifest = ArtifactManifest(
        version=config.version,
        score_anchors=SCORE_ANCHORS,
        chat_confidence=config.chat_confidence,
        hard_risk=hard_risk,
        embedder=spec,
        held_out=held_out_reports,
        cross_validation=cross_validation,
        suggested_thresholds=suggested_thresholds(held_y, scores),
        provenance=Provenance(
            seed=config.seed,
            held_out_fraction=config.held_out_fraction,
            languages=list(config.languages),
            train_rows=len(train_set),
            train_problems=train_ids,
            held_out_problems=held_ids,
            data_packages={MMATH_PACKAGE: package_version(MMATH_PACKAGE), GSM_PACKAGE: gsm_wheel().name}
            | ({MATH500_PACKAGE: package_version(MATH500_PACKAGE)} if config.math_per_level > 0 else {}),
            chat_prompts=CHAT_SOURCE,
            torch_version=torch.__version__,
            transformers_version=transformers.__version__,
            max_iterations=config.max_iterations,
            weight_decay=config.weight_decay,
            plain_renderings=config.plain_renderings,
            written_prompts=config.written_prompts,
            math_per_level=config.math_per_level,
            written_prompts_2=config.written_prompts_2,
            reasoner_per_class=config.reasoner_per_class,
        ),
        fast_head=fast_spec,
    )
    config.out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, config.out_dir / f"{config.version}.safetensors")
    (config.out_dir / f"{config.version}.json").write_text(manifest.model_dump_json(indent=2) + "\n", encoding="utf-8")
    return manifest
