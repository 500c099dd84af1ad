"""GPU benchmark of one tier replica: thinktier's own TierEngine (what the Serve deployment wraps), no Ray.

Two steps, because the GPU machine has neither the problem sets nor a network:

1. `thinktier bench gpu workload` (CPU, here): an open-loop reasoning workload from the load-test definitions
   (difficulty mix, seeded Gamma arrivals, real problems) with each request's budgets and priority decided by the
   router's own code from the policy; written as JSON and committed next to the results.
2. `thinktier bench gpu run` (GPU): for each configuration, one engine from the policy's tier with the configuration's changes
   (KV dtype, native CPU offload, scheduling policy), then the workloads it is given, then optionally a
   decode step-time profile for the planner. Results are written after each configuration, so a call cut
   short keeps what it finished.

Per configuration and workload it reports KV capacity, output tokens/s, TTFT/TTFVT/E2E per class
(p50/p90/p99), goodput under the policy's SLOs, KV occupancy over time, preemptions and offload traffic.
Dummy weights (`--load-format dummy`) emit random tokens: most requests think to their budget and answer to their
answer budget (the worst case the budgets allow); a few draw `</think>` or EOS by chance and end sooner.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from thinktier.cluster.serve_config import engine_env
from thinktier.deployments.request.decision import RoutingRequest
from thinktier.deployments.request.routing import EFFORT_CLASS, budget_decision
from thinktier.loadtest.report import Percentiles, goodput_rps
from thinktier.loadtest.workload import Mix, PromptPool, open_loop
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import SLO, BudgetProcessor, DifficultyClass, Effort, Policy, Tier

CLASS_EFFORT: dict[DifficultyClass, Effort] = {klass: effort for effort, klass in EFFORT_CLASS.items()}
CLASSES: tuple[DifficultyClass, ...] = ("easy", "medium", "hard")
DEFAULT_MIX = "easy=0.6,medium=0.25,hard=0.15"


# ---------------------------------------------------------------- workload (CPU side, pure)


@dataclass(frozen=True)
class BenchRequest:
    """One request of a workload, with what the router decided for it."""

    index: int
    send_at_s: float
    difficulty: DifficultyClass
    prompt_id: str
    text: str
    thinking_tokens: int
    answer_tokens: int
    priority: int


@dataclass(frozen=True)
class Workload:
    name: str
    rate: float
    shape: float
    duration_s: float
    seed: int
    mix: str
    requests: tuple[BenchRequest, ...]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Workload:
        requests = tuple(BenchRequest(**r) for r in data["requests"])
        return cls(**{**data, "requests": requests})


def build_workload(
    policy: Policy, pool: PromptPool, name: str, mix: Mix, rate: float, shape: float, duration_s: float, seed: int
) -> Workload:
    """Open-loop requests of the reasoning tier: classes by the mix, budgets and priority by the router's code."""
    if mix.shares.get("chat", 0) > 0:
        raise ValueError("the GPU bench drives the reasoning tier only: drop chat from --mix")
    tier = policy.routing.reasoning_tier
    requests = []
    for item in open_loop(pool, mix, rate, shape, duration_s, seed):
        klass: DifficultyClass = item.prompt.request_class  # type: ignore[assignment]
        decision = budget_decision(
            policy,
            RoutingRequest(prompt=item.prompt.text, reasoning_effort=CLASS_EFFORT[klass]),
            tier,
            CLASS_EFFORT[klass],
            "gpu_bench",
            None,
        )
        requests.append(
            BenchRequest(
                index=item.index,
                send_at_s=round(item.send_at_s, 4),
                difficulty=decision.difficulty,
                prompt_id=item.prompt.id,
                text=item.prompt.text,
                thinking_tokens=decision.thinking_tokens,
                answer_tokens=decision.answer_tokens,
                priority=decision.priority,
            )
        )
    return Workload(name, rate, shape, duration_s, seed, str(mix), tuple(requests))


# ---------------------------------------------------------------- configurations (pure)


@dataclass(frozen=True)
class BenchConfig:
    """What a configuration changes in the policy's tier, and what vLLM gets beyond the policy."""

    kv_cache_dtype: Literal["auto", "bfloat16", "fp8"]  # auto: the model's dtype (what CPU tiers without FP8 use)
    scheduling_policy: Literal["fcfs", "priority"]
    offload_gib: float = 0.0
    offload_decode_blocks: bool = False  # vLLM 0.24 offloads prompt blocks only unless told otherwise
    description: str = ""
    thinking_budget_processor: BudgetProcessor = "thinktier"


CONFIGS: dict[str, BenchConfig] = {
    "bf16": BenchConfig("bfloat16", "fcfs", description="bf16 KV, FCFS"),
    "fp8": BenchConfig("fp8", "fcfs", description="FP8 KV, FCFS"),
    "fp8-prio": BenchConfig("fp8", "priority", description="FP8 KV, priority (hard = lower priority)"),
    "fp8-vllm-budget": BenchConfig(
        "fp8", "fcfs", description="FP8 KV, FCFS, thinking budgets by vLLM's thinking_token_budget",
        thinking_budget_processor="vllm",
    ),
    "fp8-prio-vllm-budget": BenchConfig(
        "fp8", "priority", description="FP8 KV, priority, thinking budgets by vLLM's thinking_token_budget",
        thinking_budget_processor="vllm",
    ),
    "auto-prio": BenchConfig("auto", "priority", description="KV in the model's dtype, priority (the CPU example tiers)"),
    "fp8-offload": BenchConfig("fp8", "fcfs", 16, description="FP8 KV + native CPU offload as vLLM ships it (prompt blocks)"),
    "fp8-offload-decode": BenchConfig(
        "fp8", "fcfs", 16, True, description="FP8 KV + native CPU offload of prompt and decode blocks"
    ),
    "fp8-offload-decode-prio": BenchConfig(
        "fp8", "priority", 16, True, description="FP8 KV + offload of decode blocks + priority (hard = lower)"
    ),
    "fp8-offload-prio": BenchConfig(
        "fp8", "priority", 16, description="FP8 KV + native offload (prompt blocks) + priority (hard = lower)"
    ),
}


def configured_tier(tier: Tier, config: BenchConfig, model: str, kv_cache_gib: float | None, gpu_util: float) -> Tier:
    """The policy's tier with the configuration's engine changes (validated again by the schema)."""
    engine = tier.engine.model_dump()
    engine.update(
        kv_cache_dtype=config.kv_cache_dtype,
        scheduling_policy=config.scheduling_policy,
        thinking_budget_processor=config.thinking_budget_processor,
        kv_offloading={**engine["kv_offloading"], "size_gib": config.offload_gib},
        gpu_memory_utilization=gpu_util,
    )
    if kv_cache_gib is not None:
        engine["kv_cache_memory_gib"] = kv_cache_gib
    return Tier.model_validate({**tier.model_dump(), "model": model, "engine": engine})


def engine_overrides(config: BenchConfig, load_format: str) -> dict[str, Any]:
    """vLLM arguments no policy field sets: dummy weights, and the connector's decode-block offloading."""
    overrides: dict[str, Any] = {"load_format": load_format}
    if config.offload_gib > 0 and config.offload_decode_blocks:
        from vllm.config import KVTransferConfig

        overrides["kv_transfer_config"] = KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={"offload_prompt_only": False},
        )
    return overrides


# ---------------------------------------------------------------- results (pure)


@dataclass
class RequestRecord:
    index: int
    difficulty: DifficultyClass
    sent_s: float
    ttft_s: float | None = None
    ttfvt_s: float | None = None
    e2e_s: float | None = None
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    finish_reason: str | None = None


@dataclass
class Sample:
    t_s: float
    kv_occupancy: float
    num_running: int
    num_waiting: int
    preemptions_total: int
    generation_tokens_total: int
    offload_store_bytes_total: float
    offload_load_bytes_total: float


def class_summary(records: Sequence[RequestRecord], slo: SLO) -> dict[str, Any]:
    done = [r for r in records if r.e2e_s is not None]
    return {
        "sent": len(records),
        "finished": len(done),
        "met_slo": sum(slo.met(r.ttfvt_s, r.e2e_s) for r in records),
        "ttft_s": Percentiles.of([r.ttft_s for r in records if r.ttft_s is not None]).model_dump(),
        "ttfvt_s": Percentiles.of([r.ttfvt_s for r in done if r.ttfvt_s is not None]).model_dump(),
        "e2e_s": Percentiles.of([r.e2e_s for r in done]).model_dump(),
        "e2e_mean_s": float(np.mean([r.e2e_s for r in done])) if done else None,
        "mean_reasoning_tokens": float(np.mean([r.reasoning_tokens for r in done])) if done else None,
        "mean_answer_tokens": float(np.mean([r.answer_tokens for r in done])) if done else None,
    }


def summarize(
    records: Sequence[RequestRecord],
    samples: Sequence[Sample],
    slos: dict[DifficultyClass, SLO],
    wall_s: float,
    duration_s: float,
) -> dict[str, Any]:
    """One workload on one configuration: per-class latency, throughput, goodput, KV and offload figures.

    `samples` (at least two: before the first request and after the last) carry the engine's counters."""
    per_class = {k: class_summary([r for r in records if r.difficulty == k], slos[k]) for k in CLASSES}
    met = sum(c["met_slo"] for c in per_class.values())
    kv = [s.kv_occupancy for s in samples]
    first, last = samples[0], samples[-1]
    generated = last.generation_tokens_total - first.generation_tokens_total
    return {
        "wall_s": round(wall_s, 2),
        "sent": len(records),
        "finished": sum(r.e2e_s is not None for r in records),
        "output_tokens": generated,
        "output_tokens_per_s": generated / wall_s if wall_s > 0 else 0.0,
        "met_slo": met,
        "goodput_rps": goodput_rps(met, duration_s),
        "per_class": per_class,
        "kv_occupancy_mean": float(np.mean(kv)),
        "kv_occupancy_peak": float(np.max(kv)),
        "time_at_full_kv_share": float(np.mean([k >= 0.98 for k in kv])),
        "preemptions": last.preemptions_total - first.preemptions_total,
        "offload_store_gib": (last.offload_store_bytes_total - first.offload_store_bytes_total) / 2**30,
        "offload_load_gib": (last.offload_load_bytes_total - first.offload_load_bytes_total) / 2**30,
        "timeline": [asdict(s) for s in samples[:: max(1, math.ceil(len(samples) / 120))]],
        "requests": [asdict(r) for r in records],
    }


def fit_step_profile(points: Sequence[dict[str, float]]) -> dict[str, float]:
    """Least squares step_s = a + b * batch + c * batch * context (weights, per-sequence and attention costs)."""
    rows = np.array([[1.0, p["batch_size"], p["batch_size"] * p["context_tokens"]] for p in points])
    coef, *_ = np.linalg.lstsq(rows, np.array([p["step_s"] for p in points]), rcond=None)
    return {"a_s": float(coef[0]), "b_s_per_seq": float(coef[1]), "c_s_per_seq_token": float(coef[2])}


def _fmt(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def markdown_table(reports: Sequence[dict[str, Any]]) -> str:
    """One row per configuration and workload of the given `run` reports, in their order."""
    head = (
        "| config | workload | KV capacity (tokens) | output tok/s | goodput (req/s) | met SLO | "
        "easy TTFVT p50 / p99 (s) | easy E2E p50 / p99 (s) | medium E2E p50 / p99 (s) | "
        "hard TTFVT p50 / p99 (s) | hard E2E p50 / p99 (s) | hard E2E mean (s) | hard finished | KV mean / peak | "
        "preemptions | "
        "offload out / in (GiB) |"
    )
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for report in reports:
        for result in report["results"]:
            for name, w in result["workloads"].items():
                c = w["per_class"]

                def pp(klass: str, metric: str, c: dict[str, Any] = c) -> str:
                    q = c[klass][metric]
                    return f"{_fmt(q['p50'])} / {_fmt(q['p99'])}"

                lines.append(
                    f"| {result['config']} | {name} | {result['kv_capacity_tokens']:,} | {w['output_tokens_per_s']:,.0f} | "
                    f"{w['goodput_rps']:.2f} | {w['met_slo']}/{w['sent']} | {pp('easy', 'ttfvt_s')} | {pp('easy', 'e2e_s')} | "
                    f"{pp('medium', 'e2e_s')} | {pp('hard', 'ttfvt_s')} | {pp('hard', 'e2e_s')} | "
                    f"{_fmt(c['hard'].get('e2e_mean_s'))} | "
                    f"{c['hard']['finished']}/{c['hard']['sent']} | "
                    f"{w['kv_occupancy_mean']:.0%} / {w['kv_occupancy_peak']:.0%} | "
                    f"{w['preemptions']} | {w['offload_store_gib']:.1f} / {w['offload_load_gib']:.1f} |"
                )
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- GPU side


class _Runner:
    def __init__(self, engine: Any, slos: dict[DifficultyClass, SLO], use_priority: bool) -> None:
        self.engine = engine
        self.slos = slos
        self.use_priority = use_priority

    async def _one(self, req: BenchRequest, record: RequestRecord, start: float, tag: str) -> None:
        from thinktier.deployments.tier.protocol import TierRequest

        request = TierRequest(
            request_id=f"{tag}-{req.index}",
            thinking_tokens=req.thinking_tokens,
            answer_tokens=req.answer_tokens,
            priority=req.priority if self.use_priority else 0,
            difficulty=req.difficulty,
            messages=({"role": "user", "content": req.text},),
            temperature=0.6,
        )
        sent = time.monotonic()
        record.sent_s = sent - start
        async for chunk in self.engine.generate(request):
            now = time.monotonic() - sent
            if record.ttft_s is None:
                record.ttft_s = now
            if record.ttfvt_s is None and (chunk.content or chunk.finish_reason is not None):
                record.ttfvt_s = now
            if chunk.finish_reason is not None:
                record.e2e_s = now
                record.reasoning_tokens = chunk.reasoning_tokens
                record.answer_tokens = chunk.answer_tokens
                record.finish_reason = chunk.finish_reason

    def _sample(self, start: float) -> Sample:
        s = self.engine.stats()
        raw = self.engine._stats
        return Sample(
            round(time.monotonic() - start, 3),
            s.kv_occupancy,
            s.num_running,
            s.num_waiting,
            s.num_preemptions_total,
            raw.generation_tokens_total,
            raw.offload_store_bytes_total,
            raw.offload_load_bytes_total,
        )

    async def run(self, workload: Workload, drain_s: float) -> dict[str, Any]:
        start = time.monotonic()
        records = [RequestRecord(r.index, r.difficulty, r.send_at_s) for r in workload.requests]
        samples: list[Sample] = [self._sample(start)]
        done = asyncio.Event()

        async def sampler() -> None:
            while not done.is_set():
                await asyncio.sleep(0.5)
                samples.append(self._sample(start))

        async def send(req: BenchRequest, record: RequestRecord) -> None:
            await asyncio.sleep(max(0.0, start + req.send_at_s - time.monotonic()))
            await self._one(req, record, start, workload.name)

        sampling = asyncio.create_task(sampler())
        tasks = [asyncio.create_task(send(r, rec)) for r, rec in zip(workload.requests, records, strict=True)]
        deadline = workload.duration_s + drain_s
        _, pending = await asyncio.wait(tasks, timeout=max(0.0, start + deadline - time.monotonic()))
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
        wall = time.monotonic() - start
        done.set()
        await sampling
        samples.append(self._sample(start))
        summary = summarize(records, samples, self.slos, wall, workload.duration_s)
        summary["unfinished_at_deadline"] = len(pending)
        return summary


async def _step_profile(engine: Any, batches: Sequence[int], contexts: Sequence[int], seed: int) -> list[dict[str, float]]:
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
        return (metrics.last_token_ts - metrics.first_token_ts) / (metrics.num_generation_tokens - 1)

    for context in contexts:
        prefixes = [rng.integers(low, top, context - 16).tolist() for _ in range(8)]
        await asyncio.gather(*(one(f"warm-{context}-{i}", p + [low] * 16) for i, p in enumerate(prefixes)))
        for batch in batches:
            prompts = [prefixes[i % 8] + rng.integers(low, top, 16).tolist() for i in range(batch)]
            per_request = await asyncio.gather(*(one(f"prof-{context}-{batch}-{i}", p) for i, p in enumerate(prompts)))
            points.append({"batch_size": batch, "context_tokens": context, "step_s": float(np.median(per_request))})
            print(f"  profile B={batch} L={context}: {points[-1]['step_s'] * 1e3:.2f} ms/step", flush=True)
    return points


def _nvidia_smi(query: str) -> str:
    """One `nvidia-smi --query-gpu` field of the first GPU; empty where there is no NVIDIA driver."""
    if shutil.which("nvidia-smi") is None:
        return ""
    out = subprocess.run(["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader,nounits"], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""


def _cpu_name() -> str:
    """The CPU's model name from /proc/cpuinfo; empty where there is none."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    return next((line.partition(":")[2].strip() for line in lines if line.startswith("model name")), "")


def _gpu_memory_used_mib() -> int:
    used = _nvidia_smi("memory.used")
    return int(used) if used else -1


def _wait_gpu_free(limit_mib: int = 2048, timeout_s: float = 60) -> int:
    """After an engine shuts down its worker process lets go of GPU memory; wait for that before the next."""
    end = time.monotonic() + timeout_s
    used = _gpu_memory_used_mib()
    while used > limit_mib and time.monotonic() < end:
        time.sleep(1)
        used = _gpu_memory_used_mib()
    return used


@dataclass(frozen=True)
class RunSettings:
    """What every configuration of a `run` shares beyond the policy: the model and its engine's sizing, how long
    unfinished requests may drain, and the step profile's grid."""

    model: str
    load_format: str
    kv_cache_gib: float | None
    gpu_memory_utilization: float
    enforce_eager: bool
    drain_s: float
    profile_batches: Sequence[int]
    profile_contexts: Sequence[int]
    seed: int


async def run_config(
    name: str,
    policy: Policy,
    settings: RunSettings,
    workloads: dict[str, Workload],
    steps: Sequence[str],
    save: Callable[[dict[str, Any]], None],
) -> dict[str, Any]:
    """Start the configuration's engine, run its steps, shut it down; `save` gets the result after each step.

    The engine gets the environment of the tier's Serve replica (`engine_env`: on CPU tiers, the cores of
    `engine.cpu_threads` and an in-process engine core)."""
    from thinktier.deployments.tier.engine import TierEngine
    from thinktier.deployments.tier.protocol import TierRequest

    config = CONFIGS[name]
    tier_name = policy.routing.reasoning_tier
    tier = configured_tier(
        policy.tiers[tier_name], config, settings.model, settings.kv_cache_gib, settings.gpu_memory_utilization
    )
    if settings.enforce_eager:
        tier = Tier.model_validate({**tier.model_dump(), "engine": {**tier.engine.model_dump(), "enforce_eager": True}})
    os.environ.update(engine_env(tier))
    started = time.monotonic()
    engine = TierEngine(tier_name, tier, engine_overrides(config, settings.load_format))
    result: dict[str, Any] = {
        "config": name,
        "description": config.description,
        "engine": tier.engine.model_dump(),
        "engine_start_s": round(time.monotonic() - started, 1),
        "kv_capacity_tokens": engine.kv_capacity_tokens,
        "workloads": {},
    }
    print(f"[{name}] engine up in {result['engine_start_s']} s, KV capacity {engine.kv_capacity_tokens} tokens", flush=True)
    try:
        probe = TierRequest("probe", thinking_tokens=8, answer_tokens=8, messages=({"role": "user", "content": "2+2?"},))
        result["rendered_prompt_tail"] = engine.tokenizer.decode(engine.render_prompt(probe)[-6:])
        print(f"[{name}] rendered prompt ends with {result['rendered_prompt_tail']!r}", flush=True)
        await engine.warmup()
        runner = _Runner(engine, policy.slos, config.scheduling_policy == "priority")
        for step in steps:
            if step == "profile":
                points = await _step_profile(engine, settings.profile_batches, settings.profile_contexts, settings.seed)
                result["step_profile"] = {"points": points, "fit": fit_step_profile(points)}
                save(result)
                continue
            summary = await runner.run(workloads[step], settings.drain_s)
            result["workloads"][step] = summary
            save(result)
            print(
                f"[{name}/{step}] {summary['finished']}/{summary['sent']} done, {summary['output_tokens_per_s']:.0f} tok/s, "
                f"goodput {summary['goodput_rps']:.2f} rps, KV mean {summary['kv_occupancy_mean']:.2f}, "
                f"preemptions {summary['preemptions']}, easy TTFVT p99 {summary['per_class']['easy']['ttfvt_s']['p99']}",
                flush=True,
            )
    finally:
        engine.shutdown()
        del engine
    result["gpu_memory_used_after_mib"] = _wait_gpu_free()
    return result


def parse_plan(items: Sequence[str], workloads: dict[str, Workload]) -> list[tuple[str, list[str]]]:
    """'CONFIG:STEP,STEP' items in order; a step is a workload name or 'profile'."""
    plan = []
    for item in items:
        name, _, rest = item.partition(":")
        if name not in CONFIGS:
            raise ValueError(f"--config {item!r}: unknown configuration {name!r}; choose from {sorted(CONFIGS)}")
        steps = [s for s in rest.split(",") if s]
        unknown = [s for s in steps if s != "profile" and s not in workloads]
        if unknown or not steps:
            raise ValueError(f"--config {item!r}: steps must be 'profile' or workload names {sorted(workloads)}")
        plan.append((name, steps))
    return plan


def read_workloads(specs: Sequence[str]) -> dict[str, Workload]:
    """Workloads by name from 'NAME=PATH' items (PATH: a JSON file written by `write_workload`)."""
    workloads: dict[str, Workload] = {}
    for spec in specs:
        name, sep, path = spec.partition("=")
        if not sep:
            raise ValueError(f"--workload {spec!r} must look like NAME=PATH")
        workloads[name] = Workload.from_json(json.loads(Path(path).read_text()))
    return workloads


def run(
    policy_path: str,
    workloads: dict[str, Workload],
    plan: Sequence[tuple[str, Sequence[str]]],
    settings: RunSettings,
    out: Path,
    command: str,
) -> dict[str, Any]:
    """Run the plan's configurations in order (see `parse_plan`); the JSON report at `out` is rewritten after each
    step, so a run cut short keeps what it finished. `command` is recorded as how the report was made."""
    policy = load_policy(Path(policy_path))
    on_gpu = policy.tiers[policy.routing.reasoning_tier].pool.accelerator == "gpu"
    out.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": command,
        "policy": policy_path,
        "model": settings.model,
        "load_format": settings.load_format,
        "kv_cache_gib": settings.kv_cache_gib,
        "drain_s": settings.drain_s,
        "gpu": _nvidia_smi("name") if on_gpu else _cpu_name(),  # the device the tier runs on (CPU tiers: the CPU)
        "workloads": {
            n: {k: v for k, v in w.to_json().items() if k != "requests"} | {"requests": len(w.requests)}
            for n, w in workloads.items()
        },
        "results": [],
    }
    for name, steps in plan:

        def save(result: dict[str, Any], done: int = len(report["results"])) -> None:
            report["results"][done:] = [result]
            out.write_text(json.dumps(report, indent=1))

        save(asyncio.run(run_config(name, policy, settings, workloads, steps, save)))
    return report


def write_workload(
    policy: Policy,
    name: str,
    mix: Mix,
    rate: float,
    shape: float,
    duration_s: float,
    seed: int,
    languages: Sequence[str] | None,
    out: Path,
) -> Workload:
    """Build a workload from the builtin problem sets (in `languages`; all when None) and write it to `out` as JSON."""
    pool = PromptPool.builtin(languages)
    workload = build_workload(policy, pool, name, mix, rate, shape, duration_s, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(workload.to_json(), indent=1))
    return workload


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


def write_step_profile(report_path: Path, config: str, out: Path) -> dict[str, Any]:
    """Write the planner's data file (`step_profile_file`) of one configuration of a `run` report to `out`."""
    data = step_profile_file(json.loads(report_path.read_text()), config)
    out.write_text(json.dumps(data, indent=1) + "\n")
    return data
