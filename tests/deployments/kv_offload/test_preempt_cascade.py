"""Preempt-offload must not multiply preemptions when steps overlap (async scheduling, on by default on a GPU).

With a consumer connector (`kv_role` 'kv_both' or 'kv_consumer') and a step in flight, vLLM's scheduler defers freeing a
preempted request's blocks until that step is done (`defer_block_free`). vLLM 0.24, the GPU image, preempts again and
again in one scheduling pass until an allocation succeeds, so a deferred free set off the preemption of every
lower-priority running request: thousands of preemptions where there were a hundred, each copied to host memory, few
loaded back (their blocks were still in vLLM's prefix cache when they resumed). The CPU build turns async scheduling
off, so this test plays the GPU's timing on the CPU engine: one step stays in flight while the next is scheduled, and the
scheduler's preemption loop is 0.24's (no check that a preemption frees anything now).
"""

from __future__ import annotations

import collections
import os
import random
from collections.abc import Iterator
from typing import Any

import pytest

from tests.deployments.kv_offload.test_preempt_offload_engine import tier
from thinktier.deployments.tier.engine import engine_env, engine_kwargs
from thinktier.deployments.tier.models import resolve_model

pytestmark = pytest.mark.integration


@pytest.fixture
def cpu_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The environment a CPU tier replica's engine gets (this test builds vLLM's engine itself, not a TierEngine)."""
    for name, value in engine_env(tier(0.1, "off")).items():
        monkeypatch.setenv(name, value)
    yield


def overlapped_steps(scheduler: Any, kv_transfer_config: Any) -> None:
    """Make `scheduler` behave as vLLM 0.24's does on a GPU with async scheduling: the step before the one being
    scheduled is still in flight, frees of its requests' blocks are deferred when the connector is a consumer, and a
    preemption whose free is deferred does not stop the preemption loop."""
    cls = type(scheduler)
    scheduler.defer_block_free = kv_transfer_config is not None and kv_transfer_config.is_kv_consumer
    can_free = cls._request_blocks_can_be_freed

    def free_request_blocks(request: Any) -> None:  # 0.24's _free_request_blocks
        if can_free(scheduler, request):
            scheduler.kv_cache_manager.free(request)
            return
        blocks = scheduler.kv_cache_manager.pop_blocks_for_free(request)
        if blocks:
            scheduler.deferred_frees.append((scheduler.sched_step_seq, blocks))

    schedule = scheduler.schedule
    in_flight = [False]  # whether the previous step ran anything

    def schedule_with_a_step_in_flight(*args: Any, **kwargs: Any) -> Any:
        processed = scheduler.processed_step_seq
        if in_flight[0]:
            scheduler.processed_step_seq = max(processed - 1, 0)
        try:
            output = schedule(*args, **kwargs)
            in_flight[0] = output.total_num_scheduled_tokens > 0
            return output
        finally:
            scheduler.processed_step_seq = processed
            scheduler._drain_deferred_frees()  # the step in flight comes back before the next is scheduled

    scheduler._free_request_blocks = free_request_blocks
    scheduler._request_blocks_can_be_freed = lambda request: True  # 0.24 has no such check
    scheduler.schedule = schedule_with_a_step_in_flight


def preemptions(offload: str) -> tuple[int, int]:
    """Preemptions, and those a request had already had, for 60 requests of mixed priority and length, one every
    two steps, greedy, into a KV cache of 160 blocks."""
    from vllm import EngineArgs, SamplingParams
    from vllm.v1.engine.llm_engine import LLMEngine

    kwargs = engine_kwargs(tier(0.1, offload), resolve_model("builtin:tiny-random"))
    kwargs |= {"max_num_seqs": 64, "max_num_batched_tokens": 2048, "kv_cache_memory_bytes": int(2.5 * 2**20),
               "enforce_eager": True, "disable_log_stats": True}
    engine = LLMEngine.from_engine_args(EngineArgs(**kwargs))
    try:
        scheduler = engine.engine_core.engine_core.scheduler
        overlapped_steps(scheduler, engine.vllm_config.kv_transfer_config)
        counts: collections.Counter[str] = collections.Counter()
        preempt = scheduler._preempt_request

        def counted(request: Any, *args: Any, **kw: Any) -> None:
            counts["preemptions"] += 1
            counts["again"] += request.num_preemptions > 0
            preempt(request, *args, **kw)

        scheduler._preempt_request = counted
        rng = random.Random(0)
        pending = []
        for i in range(60):
            out = rng.choice([64, 64, 64, 256, 256, 768])
            prompt = [rng.randint(10, 500) for _ in range(rng.randint(40, 120))]
            pending.append((2 * i, f"r{i}", prompt, out, {64: 0, 256: 1, 768: 2}[out]))
        finished = 0
        for step in range(5000):
            while pending and pending[0][0] <= step:
                _, rid, prompt, out, priority = pending.pop(0)
                params = SamplingParams(max_tokens=out, ignore_eos=True, temperature=0.0)
                engine.add_request(rid, {"prompt_token_ids": prompt}, params, priority=priority)
            finished += sum(o.finished for o in engine.step())
            if finished == 60:
                break
        assert finished == 60
        return counts["preemptions"], counts["again"]
    finally:
        engine.engine_core.shutdown()


def test_preempt_offload_preempts_no_more_than_recompute_when_steps_overlap(cpu_env: None) -> None:
    assert os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0"
    without, _ = preemptions("off")
    with_connector, again = preemptions("preempted")
    assert without > 0  # the cache is under pressure
    assert with_connector <= without, f"{with_connector} preemptions ({again} of preempted requests) vs {without}"
