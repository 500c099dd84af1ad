"""Latency of the difficulty classifier on this CPU, against the embedder alone, at batch 1 and batched.

Prompts are the held-out rows of the shipped artifact (English problems of every class plus chat prompts), so the
length mix is the one the classifier was evaluated on. The baseline (`embed only`) runs the same embedder, same
threads, same prompts, in the same process, so the ratio isolates what the head and the score cost.
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

from deployments.difficulty import DifficultyModel
from deployments.problems import CHAT_PROMPTS, load_problems

RESULTS_DIR = Path(__file__).resolve().parent.parent / "loadtest" / "results"


@dataclass(frozen=True)
class LatencyRow:
    name: str
    batch_size: int
    prompts: int
    median_ms_per_prompt: float
    p99_ms_per_prompt: float
    mean_ms_per_prompt: float  # total time / prompts: the throughput view


def held_out_prompts(model: DifficultyModel) -> list[str]:
    """English held-out problems and held-out chat prompts of the artifact, in a fixed order."""
    held = {pid for ids in model.manifest.provenance.held_out_problems.values() for pid in ids}
    problems = [p.text for p in load_problems(["en"]) if p.id in held]
    chat = [text for i, text in enumerate(CHAT_PROMPTS) if f"chat:{i}" in held]
    return chat + problems


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


def bench(model: DifficultyModel, batch_sizes: Sequence[int], repeats: int) -> list[LatencyRow]:
    prompts = held_out_prompts(model) * repeats
    runs: dict[str, Callable[[list[str]], object]] = {
        "embed only": model.embedder.features,
        "classifier": model.score_batch,
    }
    model.score_batch(prompts[:8])  # warm-up: first calls allocate and pick kernels
    rows: list[LatencyRow] = []
    for batch_size in batch_sizes:
        for name, run in runs.items():
            latencies = per_prompt_latencies(run, prompts, batch_size, f"{name} @ batch {batch_size}")
            rows.append(
                LatencyRow(
                    name=name,
                    batch_size=batch_size,
                    prompts=len(latencies),
                    median_ms_per_prompt=round(statistics.median(latencies), 3),
                    p99_ms_per_prompt=round(p99(latencies), 3),
                    mean_ms_per_prompt=round(statistics.fmean(latencies), 3),
                )
            )
    return rows


def write_results(rows: Sequence[LatencyRow], model: DifficultyModel, aim_ms: float, out_dir: Path = RESULTS_DIR) -> Path:
    """Write classifier_bench.json and .md; returns the .md path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    baseline = {r.batch_size: r for r in rows if r.name == "embed only"}
    meta = {
        "model_version": model.version,
        "torch_threads": torch.get_num_threads(),
        "max_tokens": model.manifest.embedder.max_tokens,
        "int8": model.manifest.embedder.int8,
        "aim_median_ms_per_prompt": aim_ms,
    }
    (out_dir / "classifier_bench.json").write_text(
        json.dumps({**meta, "rows": [asdict(r) for r in rows]}, indent=2) + "\n", encoding="utf-8"
    )
    lines = [
        "# Difficulty classifier latency",
        "",
        f"Model {model.version}, torch threads {meta['torch_threads']}, prompts truncated to {meta['max_tokens']} tokens, "
        f"int8 embedder: {meta['int8']}. Held-out prompts of the artifact (English problems of every class and chat "
        "prompts). Per-prompt time = batch time / batch size, so batched medians are medians of batch means; compare "
        "batch sizes by the mean. Baseline: the embedder alone, same run.",
        "",
        "| run | batch | prompts | median ms/prompt | p99 ms/prompt | mean ms/prompt | median vs embed only |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        ratio = r.median_ms_per_prompt / baseline[r.batch_size].median_ms_per_prompt
        lines.append(
            f"| {r.name} | {r.batch_size} | {r.prompts} | {r.median_ms_per_prompt:.2f} "
            f"| {r.p99_ms_per_prompt:.2f} | {r.mean_ms_per_prompt:.2f} | {ratio:.2f}x |"
        )
    single = next(r for r in rows if r.name == "classifier" and r.batch_size == 1)
    verdict = "meets" if single.median_ms_per_prompt < aim_ms else "misses"
    lines += ["", f"Classifier at batch 1: median {single.median_ms_per_prompt:.2f} ms, {verdict} the aim of < {aim_ms} ms."]
    md = out_dir / "classifier_bench.md"
    md.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return md
