"""GPU benchmark of one tier replica: thinktier's own TierEngine (what the Serve deployment wraps), no Ray.

Two steps, because the GPU machine has neither the problem sets nor a network:

1. `thinktier bench gpu workload` (CPU, here): an open-loop reasoning workload from the load-test definitions
   (difficulty mix, seeded Gamma arrivals, real problems) with each request's budgets and priority decided by the
   router's own code from the policy; written as JSON and committed next to the results.
2. `thinktier bench gpu run` (GPU): for each configuration, one engine from the policy's tier with the configuration's changes
   (KV dtype, native CPU offload, scheduling policy, priority order), then the workloads it is given, then optionally
   a decode step-time profile for the planner. Results are written after each configuration, so a call cut
   short keeps what it finished.

Per configuration and workload it reports KV capacity, output tokens/s, TTFT/TTFVT/E2E per class
(p50/p90/p99), goodput under the policy's SLOs, KV occupancy over time, preemptions (the engine's total, and each
finished request's from the tier engine's scheduler, deployments/tier/preemption_count.py) and offload traffic.
Dummy weights (`--load-format dummy`) emit random tokens: most requests think to their budget and answer to their
answer budget (the worst case the budgets allow); a few draw `</think>` or EOS by chance and end sooner.

This module runs the configurations; beside it: gpu_workload.py (step 1), gpu_configs.py, gpu_results.py (summaries
and the table), gpu_step_profile.py (the planner's data) and gpu_device.py (nvidia-smi, the CPU's name).
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from thinktier.deployments.tier.engine import engine_env
from thinktier.loadtest.bench.gpu.gpu_configs import CONFIGS, BenchConfig, configured_tier, engine_overrides, sent_priority
from thinktier.loadtest.bench.gpu.gpu_device import device_name, wait_gpu_free
from thinktier.loadtest.bench.gpu.gpu_results import RequestRecord, Sample, summarize
from thinktier.loadtest.bench.gpu.gpu_step_profile import fit_step_profile, measure_step_profile
from thinktier.loadtest.bench.gpu.gpu_workload import BenchRequest, Workload
from thinktier.policies.loader import load_policy_with
from thinktier.policies.schema import Policy, Tier


class _Runner:
    """Sends a workload's requests to the engine at their times while sampling its stats; summarizes the run."""

    def __init__(self, engine: Any, policy: Policy, config: BenchConfig) -> None:
        self.engine = engine
        self.policy = policy
        self.config = config

    async def _one(self, req: BenchRequest, record: RequestRecord, start: float, tag: str) -> None:
        from thinktier.deployments.tier.protocol import TierRequest

        record.priority = sent_priority(self.config, self.policy, req, time.time())
        request = TierRequest(
            request_id=f"{tag}-{req.index}",
            thinking_tokens=req.thinking_tokens,
            answer_tokens=req.answer_tokens,
            priority=record.priority,
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
                record.preemptions = chunk.preemptions

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
            s.preemptions_resumed_from_host_total,
            s.preempted_tokens_total,
            s.kv_offload_loaded_tokens_total,
            s.preempted_tokens_recomputed_total,
            raw.resume_lookups_total,
            raw.resume_lookup_tokens_total,
            raw.resume_prefix_hits_total,
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
        summary = summarize(records, samples, self.policy.slos, wall, workload.duration_s)
        summary["unfinished_at_deadline"] = len(pending)
        return summary


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
        runner = _Runner(engine, policy, config)
        for step in steps:
            if step == "profile":
                points = await measure_step_profile(engine, settings.profile_batches, settings.profile_contexts, settings.seed)
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
    result["gpu_memory_used_after_mib"] = wait_gpu_free()
    return result


def run(
    policy_path: str,
    workloads: dict[str, Workload],
    plan: Sequence[tuple[str, Sequence[str]]],
    settings: RunSettings,
    out: Path,
    command: str,
    policy_settings: Sequence[tuple[str, str]] = (),
) -> dict[str, Any]:
    """Run the plan's configurations in order (see `parse_plan`) on the policy with `policy_settings` applied; the
    JSON report at `out` is rewritten after each step, so a run cut short keeps what it finished. `command` is
    recorded as how the report was made."""
    policy = load_policy_with(Path(policy_path), policy_settings)
    on_gpu = policy.tiers[policy.routing.reasoning_tier].pool.accelerator == "gpu"
    out.parent.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": command,
        "policy": policy_path,
        "model": settings.model,
        "load_format": settings.load_format,
        "kv_cache_gib": settings.kv_cache_gib,
        "drain_s": settings.drain_s,
        "gpu": device_name(on_gpu),
        "workloads": {n: w.header() for n, w in workloads.items()},
        "results": [],
    }
    for name, steps in plan:

        def save(result: dict[str, Any], done: int = len(report["results"])) -> None:
            report["results"][done:] = [result]
            out.write_text(json.dumps(report, indent=1))

        save(asyncio.run(run_config(name, policy, settings, workloads, steps, save)))
    return report
