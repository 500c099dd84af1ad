"""One simulated vLLM engine under a `thinktier bench gpu` workload: each request as the bench sends it (its budget,
and the priority its configuration gives it), the per-class figures in the bench's own summary form.

`thinktier bench planner` holds it to the recorded GPU runs (sim_validate.py); `thinktier bench gpu simulate` writes
a whole report in `run`'s shape from it, so that a question the GPU has not answered costs seconds here and its
table reads like a GPU run's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from thinktier.loadtest.bench.gpu.gpu_configs import CONFIGS, BenchConfig, sent_priority
from thinktier.loadtest.bench.gpu.gpu_results import class_summary
from thinktier.loadtest.bench.gpu.gpu_workload import CLASSES, Workload
from thinktier.loadtest.report import goodput_rps
from thinktier.loadtest.sim.sim_profile import HardwareProfile
from thinktier.loadtest.sim.sim_replica import SimReplica, SimRequest
from thinktier.loadtest.sim.sim_workload import TEMPLATE_TOKENS
from thinktier.policies.schema import Policy

SAMPLE_S = 0.5
"""How often KV occupancy is sampled, as the GPU bench samples it."""


@dataclass(frozen=True)
class EngineReplay:
    per_class: dict[str, dict[str, Any]]
    """Per class, in the bench's own summary form."""
    output_tokens_per_s: float
    """Generated tokens over the time from the first send to the last finish, as the bench counts it."""
    wall_s: float
    output_tokens: int
    preemptions: int
    kv_occupancy: Sequence[float]
    unfinished: int

    def summary(self, duration_s: float) -> dict[str, Any]:
        """The figures of `gpu_results.summarize` that a simulation has (no offload: the simulator models none)."""
        met = sum(c["met_slo"] for c in self.per_class.values())
        return {
            "wall_s": round(self.wall_s, 2), "sent": sum(c["sent"] for c in self.per_class.values()),
            "finished": sum(c["finished"] for c in self.per_class.values()), "output_tokens": self.output_tokens,
            "output_tokens_per_s": self.output_tokens_per_s, "met_slo": met, "goodput_rps": goodput_rps(met, duration_s),
            "per_class": self.per_class, "kv_occupancy_mean": sum(self.kv_occupancy) / len(self.kv_occupancy),
            "kv_occupancy_peak": max(self.kv_occupancy), "preemptions": self.preemptions, "offload_store_gib": 0.0,
            "offload_load_gib": 0.0, "unfinished_at_deadline": self.unfinished,
        }


def replay_engine(
    workload: Workload, policy: Policy, tier: str, profile: HardwareProfile, config: BenchConfig, drain_s: float,
    kv_tokens: int,
) -> EngineReplay:
    """`workload` through one simulated replica of `tier` with `kv_tokens` of KV cache, cut `drain_s` after the last
    arrival."""
    engine = policy.tiers[tier].engine
    replica = SimReplica(
        "engine", profile, kv_tokens, engine.max_num_seqs, engine.max_num_batched_tokens or 8192,
        config.scheduling_policy == "priority", policy.tiers[tier].stragglers,
    )
    arrivals = sorted(workload.requests, key=lambda r: r.send_at_s)
    requests: list[SimRequest] = []
    kv: list[float] = []
    cut = workload.duration_s + drain_s
    t, i = 0.0, 0
    while t <= cut and len(replica.finished) < len(arrivals):
        while i < len(arrivals) and arrivals[i].send_at_s <= t:
            item = arrivals[i]
            request = SimRequest(
                item.index, item.difficulty, item.prompt_id, item.send_at_s, len(item.text) // 4 + TEMPLATE_TOKENS,
                item.thinking_tokens, item.answer_tokens, sent_priority(config, policy, item, item.send_at_s),
            )
            replica.submit(request, request.arrival_s)
            requests.append(request)
            i += 1
        replica.advance_to(t)
        kv.append(replica.stats().kv_occupancy)
        t += SAMPLE_S
    per_class: dict[str, dict[str, Any]] = {}
    for cls in CLASSES:
        records = [_EngineRecord(r) for r in requests if r.request_class == cls]
        per_class[cls] = class_summary(records, policy.slos[cls])  # type: ignore[arg-type]
    ends = [r.end_s for r in requests if r.end_s is not None]
    unfinished = len(arrivals) - len(ends)
    wall = max(ends, default=0.0) if unfinished == 0 else cut
    generated = sum(r.thinking_tokens + r.answer_tokens if r.end_s is not None else r.generated for r in requests)
    return EngineReplay(per_class, generated / wall if wall > 0 else 0.0, wall, generated, replica.preemptions_total,
                        kv, unfinished)


@dataclass(frozen=True)
class _EngineRecord:
    """A simulated request in the shape `gpu_results.class_summary` reads."""

    request: SimRequest

    @property
    def difficulty(self) -> str:
        return self.request.request_class

    @property
    def e2e_s(self) -> float | None:
        return None if self.request.end_s is None else self.request.end_s - self.request.arrival_s

    @property
    def ttft_s(self) -> float | None:
        r = self.request
        return None if r.first_token_s is None else r.first_token_s - r.arrival_s

    @property
    def ttfvt_s(self) -> float | None:
        r = self.request
        return None if r.first_answer_s is None else r.first_answer_s - r.arrival_s

    @property
    def reasoning_tokens(self) -> int:
        return self.request.thinking_tokens

    @property
    def answer_tokens(self) -> int:
        return self.request.answer_tokens

    @property
    def preemptions(self) -> int:
        return self.request.preemptions


def simulate_bench(
    policy: Policy, workloads: dict[str, Workload], plan: Sequence[tuple[str, Sequence[str]]], profile: HardwareProfile,
    kv_cache_gib: float, drain_s: float,
) -> list[dict[str, Any]]:
    """`thinktier bench gpu run`'s `results` for `plan` (configurations and their workloads, in order) on the simulated
    engine: each configuration's KV cache of `kv_cache_gib` in its own KV dtype. Offload and the step profile itself
    are not simulated."""
    tier = policy.routing.reasoning_tier
    results = []
    for name, steps in plan:
        config = CONFIGS[name]
        if config.offload_gib > 0 or "profile" in steps:
            raise ValueError(f"--config {name}:{','.join(steps)}: the simulator models no KV offload and measures no "
                             "step profile; run it on a GPU")
        dtype = policy.tiers[tier].engine.dtype
        kv_tokens = int(kv_cache_gib * 1024**3 // profile.geometry.kv_bytes_per_token(config.kv_cache_dtype, dtype))
        result: dict[str, Any] = {"config": name, "description": config.description, "kv_capacity_tokens": kv_tokens,
                                  "workloads": {}}
        for step in steps:
            replay = replay_engine(workloads[step], policy, tier, profile, config, drain_s, kv_tokens)
            result["workloads"][step] = replay.summary(workloads[step].duration_s)
        results.append(result)
    return results
