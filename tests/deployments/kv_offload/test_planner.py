"""The preempt-offload planner's bookkeeping, step by step as vLLM's scheduler drives it (no engine)."""

from __future__ import annotations

from thinktier.deployments.tier.kv_offload.planner import BlockCopy, PreemptedKVPlanner, Scheduled, StepCopies

BLOCK = 16


def running(planner: PreemptedKVPlanner, request_id: str, blocks: list[int], tokens_with_kv: int) -> StepCopies:
    return planner.step([], [Scheduled(request_id, blocks, True, tokens_with_kv)])


def test_a_preempted_request_is_stored_whole_blocks_and_loaded_back_where_vllm_put_it() -> None:
    planner = PreemptedKVPlanner(num_slots=8, block_size=BLOCK)
    running(planner, "a", [10, 11, 12], 40)  # 2 full blocks of KV, a third partly filled
    copies = planner.step([("a", 41)], [])
    assert copies.stores == (BlockCopy((10, 11), (0, 1)),) and planner.free_slots == 6

    # on resume vLLM's own prefix cache still held the first block: only the second comes from host memory
    assert planner.stored_tokens("a", 41, num_computed_tokens=BLOCK) == BLOCK
    planner.loading("a", [10, 20, 21], num_tokens=41, num_external_tokens=BLOCK)
    copies = planner.step([], [Scheduled("a", [10, 20, 21], True, 41)])
    assert copies.loads == (BlockCopy((20,), (1,)),)
    counters = planner.take_counters()
    assert (counters.preemptions_stored, counters.resumed_from_host, counters.blocks_stored, counters.blocks_loaded) == (
        1, 1, 2, 1)
    assert (counters.tokens_preempted, counters.tokens_loaded, counters.tokens_recomputed) == (41, 16, 9)


def test_slots_of_a_load_are_reused_only_from_the_next_step() -> None:
    """The worker stores before it loads within a step: a slot freed by this step's load must not take a store."""
    planner = PreemptedKVPlanner(num_slots=2, block_size=BLOCK)
    running(planner, "a", [1, 2], 32)
    planner.step([("a", 40)], [])
    planner.stored_tokens("a", 40, 0)
    planner.loading("a", [5, 6, 7], 40, 32)
    running(planner, "b", [8, 9], 32)  # the step that loads a: no free slot for b yet
    assert planner.free_slots == 0
    assert planner.step([("b", 40)], []).stores == (BlockCopy((8, 9), (0, 1)),)


def test_a_freed_run_of_slots_is_handed_out_again_as_one_run() -> None:
    """The copier moves each run of consecutive slots in one copy, so churn must not scatter a request's slots."""
    planner = PreemptedKVPlanner(num_slots=8, block_size=BLOCK)
    running(planner, "a", [1, 2, 3], 48)
    running(planner, "b", [4, 5, 6], 48)
    assert planner.step([("a", 49), ("b", 49)], []).stores == (BlockCopy((1, 2, 3), (0, 1, 2)), BlockCopy((4, 5, 6), (3, 4, 5)))
    planner.finished("a")
    running(planner, "c", [7, 8, 9, 10], 64)
    assert planner.step([("c", 65)], []).stores == (BlockCopy((7, 8, 9, 10), (0, 1, 2, 6)),)


def test_a_preemption_stores_what_fits_and_the_rest_is_recomputed() -> None:
    planner = PreemptedKVPlanner(num_slots=1, block_size=BLOCK)
    running(planner, "a", [3, 4, 5], 48)
    assert planner.step([("a", 49)], []).stores == (BlockCopy((3,), (0,)),)
    assert planner.stored_tokens("a", 49, 0) == BLOCK
    running(planner, "b", [6, 7], 32)
    assert planner.step([("b", 33)], []).stores == ()  # no slot left
    assert planner.take_counters().preemptions_not_stored == 1


def test_finished_requests_keep_nothing() -> None:
    planner = PreemptedKVPlanner(num_slots=4, block_size=BLOCK)
    running(planner, "a", [1, 2], 32)
    planner.step([("a", 33)], [])
    planner.finished("a")  # aborted while waiting to resume
    assert planner.free_slots == 4 and planner.stored_tokens("a", 33, 0) == 0
    running(planner, "b", [1, 2], 32)
    planner.finished("b")  # finished normally: never stored, even though its blocks were full
    assert planner.step([("b", 33)], []).stores == ()


def test_the_last_token_and_tokens_without_kv_are_never_loaded() -> None:
    """vLLM always computes a request's final token; a resumed request shorter than what was stored (its stale
    output dropped) can load only the whole blocks before its final token."""
    planner = PreemptedKVPlanner(num_slots=4, block_size=BLOCK)
    running(planner, "a", [1, 2, 3], 48)
    planner.step([("a", 48)], [])  # 48 tokens with KV, but the 48th is the last: two blocks are usable
    assert planner.stored_tokens("a", 48, 0) == 32
    assert planner.stored_tokens("a", 20, 0) == BLOCK


def test_blocks_added_step_by_step_are_the_ones_stored() -> None:
    planner = PreemptedKVPlanner(num_slots=4, block_size=BLOCK)
    running(planner, "a", [7], 16)
    planner.step([], [Scheduled("a", [9], False, 32), Scheduled("b", None, False, 5)])
    planner.step([], [Scheduled("a", None, False, 33)])
    assert planner.step([("a", 34)], []).stores == (BlockCopy((7, 9), (0, 1)),)
