"""The host pool moves blocks exactly: what a step stores comes back at a later step, into whichever blocks the
resumed request is given, whatever the engine wrote over the old ones meanwhile."""

from __future__ import annotations

import torch

from thinktier.deployments.tier.kv_offload.copier import HostKVPool, block_dim, slot_runs
from thinktier.deployments.tier.kv_offload.planner import BlockCopy

NUM_BLOCKS = 8


def caches() -> dict[str, torch.Tensor]:
    """Two layers in vLLM's two layouts: blocks first, and K/V first then blocks; one of them FP8."""
    first = torch.arange(NUM_BLOCKS * 2 * 3, dtype=torch.bfloat16).reshape(NUM_BLOCKS, 2, 3)
    second = torch.randn(2, NUM_BLOCKS, 4).to(torch.float8_e4m3fn)
    return {"layer.0": first, "layer.1": second}


def test_stored_blocks_come_back_after_their_gpu_blocks_are_reused() -> None:
    kv = caches()
    before = {name: cache.clone() for name, cache in kv.items()}
    pool = HostKVPool(kv, NUM_BLOCKS, num_slots=4)
    pool.store([BlockCopy((1, 2), (0, 1)), BlockCopy((5,), (3,))])  # two requests preempted in one step
    for cache in kv.values():
        cache.view(torch.uint8).zero_()  # the freed blocks are reused by other requests
    pool.store([])  # the next step preempts nobody
    pool.load([BlockCopy((6, 0), (0, 1)), BlockCopy((3,), (3,))])
    assert torch.equal(kv["layer.0"][[6, 0, 3]], before["layer.0"][[1, 2, 5]])
    loaded = kv["layer.1"].view(torch.uint8)[:, [6, 0, 3]]
    assert torch.equal(loaded, before["layer.1"].view(torch.uint8)[:, [1, 2, 5]])


def test_a_request_preempted_at_one_step_can_resume_at_the_next() -> None:
    kv = caches()
    before = kv["layer.0"].clone()
    pool = HostKVPool(kv, NUM_BLOCKS, num_slots=2)
    pool.store([BlockCopy((4,), (1,))])
    kv["layer.0"][4] = 0
    pool.load([BlockCopy((7,), (1,))])  # no store in between: the load places the stored block first
    assert torch.equal(kv["layer.0"][7], before[4])


def test_slots_out_of_order_and_in_runs_come_back_exactly() -> None:
    """A store and a load split into runs of consecutive slots, whatever order the planner gave them in."""
    kv = caches()
    before = {name: cache.clone() for name, cache in kv.items()}
    pool = HostKVPool(kv, NUM_BLOCKS, num_slots=6)
    pool.store([BlockCopy((0, 1, 2), (4, 5, 0)), BlockCopy((3, 4), (2, 1))])
    for cache in kv.values():
        cache.view(torch.uint8).zero_()
    pool.load([BlockCopy((7, 6, 5, 4, 3), (2, 1, 4, 5, 0))])
    for name, cache in kv.items():
        dim = block_dim(cache, NUM_BLOCKS)
        loaded, stored = cache.view(torch.uint8).movedim(dim, 0), before[name].view(torch.uint8).movedim(dim, 0)
        assert torch.equal(loaded[[7, 6, 5, 4, 3]], stored[[3, 4, 0, 1, 2]])


def test_slot_runs_are_the_consecutive_ascending_stretches() -> None:
    assert slot_runs([4, 5, 0, 2, 1, 7, 8, 9]) == [(0, 4, 2), (2, 0, 1), (3, 2, 1), (4, 1, 1), (5, 7, 3)]
    assert slot_runs([]) == []
