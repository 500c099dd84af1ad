"""The bench's configurations (pure): what each changes in the policy's tier, what vLLM gets beyond the policy (each
request's priority included), and the plan of a run (configurations in order, each with its steps)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from thinktier.deployments.request.routing import vllm_priority
from thinktier.loadtest.bench.gpu.gpu_workload import BenchRequest, Workload
from thinktier.policies.schema import BudgetProcessor, Policy, Tier
from thinktier.policies.schema.engine import KVOffloadingMode
from thinktier.policies.schema.tier import PROCESS_MEMORY_GIB


@dataclass(frozen=True)
class BenchConfig:
    """What a configuration changes in the policy's tier, and what vLLM gets beyond the policy."""

    kv_cache_dtype: Literal["auto", "bfloat16", "fp8"]  # auto: the model's dtype (what CPU tiers without FP8 use)
    scheduling_policy: Literal["fcfs", "priority"]
    offload_gib: float = 0.0
    offload_decode_blocks: bool = False  # vLLM 0.24 offloads prompt blocks only unless told otherwise
    description: str = ""
    thinking_budget_processor: BudgetProcessor = "thinktier"
    offload_mode: KVOffloadingMode = "native"
    """What offloads when offload_gib > 0: vLLM's native connector or the project's preempt-offload."""
    async_scheduling: bool | None = None
    """vLLM's async scheduling (None: vLLM's default, on for a GPU). Off for a fair run of vLLM's native offloading
    connector: it declares kv_role 'kv_both', and with a consumer role and async scheduling vLLM 0.24 defers freeing a
    preempted request's blocks, which its preemption loop answers by preempting every lower-priority request
    (loadtest/results/gpu-offload/README.md)."""
    priority_order: Literal["class", "deadline"] = "class"
    """Under priority scheduling, how each request's priority is set (the router's routing.priority_order): see
    `sent_priority`."""


CONFIGS: dict[str, BenchConfig] = {
    "bf16": BenchConfig("bfloat16", "fcfs", description="bf16 KV, FCFS"),
    "fp8": BenchConfig("fp8", "fcfs", description="FP8 KV, FCFS"),
    "fp8-prio": BenchConfig("fp8", "priority", description="FP8 KV, priority (hard = lower priority)"),
    "fp8-deadline": BenchConfig(
        "fp8", "priority", description="FP8 KV, priority by deadline (send time + the class's TTFVT SLO; earliest first)",
        priority_order="deadline",
    ),
    "fp8-vllm-budget": BenchConfig(
        "fp8", "fcfs", description="FP8 KV, FCFS, thinking budgets by vLLM's thinking_token_budget",
        thinking_budget_processor="vllm",
    ),
    "fp8-prio-vllm-budget": BenchConfig(
        "fp8", "priority", description="FP8 KV, priority, thinking budgets by vLLM's thinking_token_budget",
        thinking_budget_processor="vllm",
    ),
    "auto-prio": BenchConfig("auto", "priority", description="KV in the model's dtype, priority (the CPU example tiers)"),
    "auto-preempt-offload-prio": BenchConfig(
        "auto", "priority", 1, description="KV in the model's dtype, priority, preempt-offload (1 GiB of host memory)",
        offload_mode="preempted",
    ),
    "fp8-offload": BenchConfig("fp8", "fcfs", 16, description="FP8 KV + native CPU offload as vLLM ships it (prompt blocks)"),
    "fp8-offload-decode": BenchConfig(
        "fp8", "fcfs", 16, True, description="FP8 KV + native CPU offload of prompt and decode blocks"
    ),
    "fp8-offload-decode-prio": BenchConfig(
        "fp8", "priority", 16, True, description="FP8 KV + offload of decode blocks + priority (hard = lower)"
    ),
    "fp8-prio-sync": BenchConfig(
        "fp8", "priority", description="FP8 KV, priority, async scheduling off (the baseline of fp8-offload-decode-prio-sync)",
        async_scheduling=False,
    ),
    "fp8-offload-decode-prio-sync": BenchConfig(
        "fp8", "priority", 16, True, description="FP8 KV + native offload of decode blocks + priority, async scheduling off",
        async_scheduling=False,
    ),
    "fp8-offload-prio": BenchConfig(
        "fp8", "priority", 16, description="FP8 KV + native offload (prompt blocks) + priority (hard = lower)"
    ),
    "fp8-preempt-offload": BenchConfig(
        "fp8", "fcfs", 16, description="FP8 KV + preempt-offload (a preempted request's blocks, loaded on resume)",
        offload_mode="preempted",
    ),
    "fp8-preempt-offload-prio": BenchConfig(
        "fp8", "priority", 16, description="FP8 KV + preempt-offload + priority (hard = lower)", offload_mode="preempted"
    ),
}


def configured_tier(tier: Tier, config: BenchConfig, model: str, kv_cache_gib: float | None, gpu_util: float) -> Tier:
    """The policy's tier with the configuration's engine changes (validated again by the schema)."""
    engine = tier.engine.model_dump()
    engine.update(
        kv_cache_dtype=config.kv_cache_dtype,
        scheduling_policy=config.scheduling_policy,
        thinking_budget_processor=config.thinking_budget_processor,
        kv_offloading={**engine["kv_offloading"], "size_gib": config.offload_gib,
                       "mode": config.offload_mode if config.offload_gib > 0 else "off"},
        gpu_memory_utilization=gpu_util,
    )
    if kv_cache_gib is not None:
        engine["kv_cache_memory_gib"] = kv_cache_gib
    pool = tier.pool.model_dump()
    pool["memory_gib"] = max(pool["memory_gib"], config.offload_gib + PROCESS_MEMORY_GIB)  # the bench owns its host
    return Tier.model_validate({**tier.model_dump(), "model": model, "engine": engine, "pool": pool})


def engine_overrides(config: BenchConfig, load_format: str) -> dict[str, Any]:
    """vLLM arguments no policy field sets: dummy weights, async scheduling, and the connector's decode-block
    offloading."""
    overrides: dict[str, Any] = {"load_format": load_format}
    if config.async_scheduling is not None:
        overrides["async_scheduling"] = config.async_scheduling
    if config.offload_gib > 0 and config.offload_decode_blocks:
        from vllm.config import KVTransferConfig

        overrides["kv_transfer_config"] = KVTransferConfig(
            kv_connector="OffloadingConnector",
            kv_role="kv_both",
            kv_connector_extra_config={"offload_prompt_only": False},
        )
    return overrides


def sent_priority(config: BenchConfig, policy: Policy, request: BenchRequest, arrival_s: float) -> int:
    """The vLLM priority the bench sends `request` with: 0 under FCFS (vLLM ignores it); in class order the workload's
    (the router's class priority, decided when the workload was written); in deadline order the router's own rule
    (`vllm_priority`) with `arrival_s` the moment the bench sends it, as the Ingress stamps time.time() on arrival.

    The workload's class is the one the router scheduled the request as: workloads are written without classifier
    scores, so a request's class is its effort's."""
    if config.scheduling_policy == "fcfs":
        return 0
    if config.priority_order == "class":
        return request.priority
    routing = policy.routing.model_copy(update={"priority_order": "deadline"})
    return vllm_priority(policy.model_copy(update={"routing": routing}), request.difficulty, arrival_s)


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
