"""The planner's step profile: decode step time by batch size and context length, measured on a running engine,
fitted to a cost model, and written as the planner's data file from a `run` report."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


async def measure_step_profile(engine: Any, batches: Sequence[int], contexts: Sequence[int], seed: int) -> list[dict[str, float]]:
    """Decode step time by batch size and context length: B requests of L-token prompts decode 32 tokens together.

    The step time is the median over the batch of (last - first token time) / (tokens - 1), from the engine
    core's own timestamps. Prompts share one of 8 prefixes (prefix caching skips their prefill), so the
    profile costs seconds; shared KV may be read from L2 more often than distinct contexts would be, so the
    attention share is a lower bound."""
    from vllm import SamplingParams
    from vllm.sampling_params import RequestOutputKind

    rng = np.random.default_rng(seed)
    steps = 32
    top = min(100_000, len(engine.tokenizer))  # ordinary tokens: ids below the added special tokens
    low = top // 100
    params = SamplingParams(max_tokens=steps + 1, ignore_eos=True, temperature=0.0, output_kind=RequestOutputKind.DELTA)
    points = []

    async def one(rid: str, ids: list[int]) -> float:
        metrics = None
        async for output in engine.engine.generate({"prompt_token_ids": ids}, params, rid):
            metrics = output.metrics
        assert metrics is not None and metrics.num_generation_tokens > 1, f"{rid}: no token timestamps from vLLM"
        return float((metrics.last_token_ts - metrics.first_token_ts) / (metrics.num_generation_tokens - 1))

    for context in contexts:
        prefixes = [rng.integers(low, top, context - 16).tolist() for _ in range(8)]
        await asyncio.gather(*(one(f"warm-{context}-{i}", p + [low] * 16) for i, p in enumerate(prefixes)))
        for batch in batches:
            prompts = [prefixes[i % 8] + rng.integers(low, top, 16).tolist() for i in range(batch)]
            per_request = await asyncio.gather(*(one(f"prof-{context}-{batch}-{i}", p) for i, p in enumerate(prompts)))
            points.append({"batch_size": batch, "context_tokens": context, "step_s": float(np.median(per_request))})
            print(f"  profile B={batch} L={context}: {points[-1]['step_s'] * 1e3:.2f} ms/step", flush=True)
    return points


def fit_step_profile(points: Sequence[dict[str, float]]) -> dict[str, float]:
    """Least squares step_s = a + b * batch + c * batch * context (weights, per-sequence and attention costs)."""
    rows = np.array([[1.0, p["batch_size"], p["batch_size"] * p["context_tokens"]] for p in points])
    coef, *_ = np.linalg.lstsq(rows, np.array([p["step_s"] for p in points]), rcond=None)
    return {"a_s": float(coef[0]), "b_s_per_seq": float(coef[1]), "c_s_per_seq_token": float(coef[2])}


def step_profile_file(report: dict[str, Any], config: str) -> dict[str, Any]:
    """The planner's data: decode step time by batch size and context length, from one configuration's profile."""
    result = next((r for r in report["results"] if r["config"] == config and "step_profile" in r), None)
    if result is None:
        raise ValueError(f"the report has no step profile for configuration {config!r}; run it with --config {config}:profile")
    engine = result["engine"]
    return {
        "source": report["command"],
        "gpu": report["gpu"],
        "model": f"{report['model']}, load_format {report['load_format']}, dtype {engine['dtype']}",
        "kv_cache_dtype": engine["kv_cache_dtype"],
        "cuda_graphs": not engine["enforce_eager"],
        "max_num_seqs": engine["max_num_seqs"],
        "method": "B requests with L-token prompts decode 32 tokens together; step_s is the median over the batch of "
        "(last - first token time) / (tokens - 1) from vLLM's engine-core timestamps. Prompts share 8 prefixes, so "
        "attention may read KV from L2 more than with distinct contexts (a lower bound on the context term).",
        "columns": ["batch_size", "context_tokens", "step_s"],
        "points": [[p["batch_size"], p["context_tokens"], p["step_s"]] for p in result["step_profile"]["points"]],
        "fit": {"formula": "step_s = a_s + b_s_per_seq * batch + c_s_per_seq_token * batch * context"}
        | result["step_profile"]["fit"],
    }


def write_step_profile(
    report_path: Path, config: str, out: Path, geometry_from: Path | None = None, device_memory_gib: float | None = None
) -> dict[str, Any]:
    """Write the planner's data file (`step_profile_file`) of one configuration of a `run` report to `out`, with the
    profiled model's geometry taken from another profile of the same model and one device's memory, where given (the
    planner needs both: KV tokens per GiB, and KV sized by gpu_memory_utilization)."""
    data = step_profile_file(json.loads(report_path.read_text()), config)
    if geometry_from is not None:
        other = json.loads(geometry_from.read_text())
        if "geometry" not in other:
            raise ValueError(f"{geometry_from}: no 'geometry' to take")
        data["geometry"] = other["geometry"]
        data["geometry_source"] = f"{geometry_from.name}, a profile of the same model: {other.get('geometry_source', '')}"
    if device_memory_gib is not None:
        data["device_memory_gib"] = device_memory_gib
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data
