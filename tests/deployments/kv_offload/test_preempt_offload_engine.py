"""Preempt-offload on a real vLLM engine (CPU, in this process, no Ray): under KV pressure with priority scheduling,
requests preempted and resumed from host memory produce exactly the greedy tokens they produce without any
preemption, and the replica reports what moved."""

from __future__ import annotations

import asyncio
import random

import pytest

from thinktier.deployments.tier.engine import TierEngine
from thinktier.deployments.tier.protocol import TierChunk, TierRequest, collect
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import Tier
from thinktier.training.reasoner.tasks import sample_problem

pytestmark = pytest.mark.integration
REASONER = "policies/examples/reasoner.yaml"


def tier(kv_cache_gib: float, offload: str) -> Tier:
    """The shipped reasoner's tier, 2,048 tokens a request at most (a small KV cache then holds one or two long
    ones)."""
    base = load_policy(REASONER).tiers["reasoning"]
    budget = {"thinking_tokens": 1500, "answer_tokens": 32}
    engine = base.engine.model_copy(update={
        "kv_cache_memory_gib": kv_cache_gib, "block_size": 32, "max_num_seqs": 16, "scheduling_policy": "priority",
        "max_model_len": 2048,
        "kv_offloading": {"mode": offload, "size_gib": 0.25 if offload != "off" else 0},
    })
    return Tier.model_validate({**base.model_dump(), "engine": engine.model_dump(),
                                "budgets": dict.fromkeys(("low", "medium", "high"), budget),
                                "pool": {**base.pool.model_dump(), "memory_gib": 3}})


def serve(loop: asyncio.AbstractEventLoop, served: Tier) -> tuple[list[TierChunk], ReplicaStats]:
    """Twelve chain problems arriving 0.5 s apart at mixed priorities, greedy, each up to 1,500 thinking tokens."""
    rng = random.Random(0)
    prompts = [sample_problem(rng, rng.randint(20, 40)).prompt for _ in range(12)]

    async def go() -> tuple[list[TierChunk], ReplicaStats]:
        engine = TierEngine("reasoning", served)

        async def one(i: int, prompt: str) -> TierChunk:
            await asyncio.sleep(0.5 * i)
            request = TierRequest(request_id=f"r{i}", thinking_tokens=1500, answer_tokens=32, prompt=prompt,
                                  temperature=0.0, priority=i % 3)
            return await collect(engine.generate(request))

        try:
            chunks = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
            await asyncio.sleep(0.3)  # the stat logger records the last step after its outputs are delivered
            return list(chunks), engine.stats()
        finally:
            engine.shutdown()

    return loop.run_until_complete(go())


def test_resumed_from_host_memory_the_tokens_are_those_of_a_run_without_preemption(
    loop: asyncio.AbstractEventLoop,
) -> None:
    reference, calm = serve(loop, tier(1.0, "off"))
    offloaded, pressed = serve(loop, tier(0.025, "preempted"))
    assert calm.num_preemptions_total == 0
    assert pressed.num_preemptions_total > 0 and pressed.preemptions_resumed_from_host_total > 0
    # each request's last chunk says how often it was preempted (vLLM's outputs give only the engine's total)
    assert [c.preemptions for c in reference] == [0] * len(reference)
    assert sum(c.preemptions for c in offloaded) == pressed.num_preemptions_total
    assert [(c.reasoning, c.content) for c in offloaded] == [(c.reasoning, c.content) for c in reference]
    assert pressed.kv_offload_loaded_bytes_total > 0 and pressed.kv_offload_loaded_tokens_total > 0
    assert pressed.kv_offload_stored_bytes_total >= pressed.kv_offload_loaded_bytes_total
    # vLLM's own prefix cache and the host copy together leave almost nothing to recompute
    assert pressed.preempted_tokens_recomputed_total < 0.1 * pressed.preempted_tokens_total
