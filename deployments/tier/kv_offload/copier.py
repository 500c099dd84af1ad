"""The worker's side of preempt-offload: a host copy of KV blocks, and the copies in and out of the engine's cache.

The copies run on the current stream of the engine's device, before the step's forward pass (vLLM calls
`handle_preemptions` and, for loads the step depends on, `start_load_kv` before it), so in stream order a store reads
blocks before the forward pass overwrites them, a load fills blocks before it reads them, and a load of a slot comes
after the store that filled it. The host only enqueues: every copy is one DMA between the device and a run of
consecutive slots of pinned host memory (the planner hands out slots in runs), gathered or scattered on the device,
so no copy waits on the host and no byte passes through the CPU. That is what makes the freed blocks safe to reuse at
once. The first version gathered loads and placed stores on the CPU: on an H100 under sustained overload it slowed
every decode step (loadtest/results/gpu-offload/README.md). CPU engines take the same path with plain copies.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from thinktier.deployments.tier.kv_offload.planner import BlockCopy


def block_dim(cache: torch.Tensor, num_blocks: int) -> int:
    """The dimension of a layer's KV cache that indexes blocks: vLLM's layouts put it first, or second after K/V."""
    for dim in (0, 1):
        if cache.shape[dim] == num_blocks:
            return dim
    raise ValueError(f"no block dimension of size {num_blocks} in a KV cache of shape {tuple(cache.shape)}")


def _bytes_view(cache: torch.Tensor) -> torch.Tensor:
    """One-byte dtypes (FP8 KV) as uint8: index_select and index_copy_ are not implemented for float8 everywhere."""
    return cache.view(torch.uint8) if cache.element_size() == 1 else cache


def slot_runs(slots: Sequence[int]) -> list[tuple[int, int, int]]:
    """Each run of consecutive ascending slots as (its offset in `slots`, its first slot, its length)."""
    runs: list[tuple[int, int, int]] = []
    for offset, slot in enumerate(slots):
        if runs and slot == runs[-1][1] + runs[-1][2]:
            start, first, length = runs[-1]
            runs[-1] = (start, first, length + 1)
        else:
            runs.append((offset, slot, 1))
    return runs


@dataclass
class _Plane:
    """Blocks along dimension 0, on the device and in host memory: a layer's cache, or its K or V half."""

    cache: torch.Tensor
    host: torch.Tensor


def _merged(copies: Sequence[BlockCopy]) -> tuple[list[int], list[int]]:
    return [b for c in copies for b in c.gpu_blocks], [s for c in copies for s in c.cpu_slots]


class HostKVPool:
    """`num_slots` blocks of every layer's KV in host memory (pinned where the cache is on a GPU)."""

    def __init__(self, kv_caches: dict[str, torch.Tensor], num_blocks: int, num_slots: int) -> None:
        self.device = next(iter(kv_caches.values())).device
        self._async = self.device.type == "cuda"
        self._planes: list[_Plane] = []
        for cache in kv_caches.values():
            view = _bytes_view(cache)
            halves = [view] if block_dim(view, num_blocks) == 0 else list(view.unbind(0))
            for half in halves:
                shape = (num_slots, *half.shape[1:])
                host = torch.empty(shape, dtype=half.dtype, device="cpu", pin_memory=self._async)
                self._planes.append(_Plane(half, host))

    def _indices(self, blocks: list[int]) -> torch.Tensor:
        indices = torch.tensor(blocks, dtype=torch.long)
        return indices.pin_memory().to(self.device, non_blocking=True) if self._async else indices

    def store(self, copies: Sequence[BlockCopy]) -> None:
        """Copy a step's preempted blocks into their host slots, in stream order before the forward pass."""
        if not copies:
            return
        blocks, slots = _merged(copies)
        indices, runs = self._indices(blocks), slot_runs(slots)
        for plane in self._planes:
            gathered = plane.cache.index_select(0, indices)
            for offset, first, length in runs:
                plane.host[first : first + length].copy_(gathered[offset : offset + length], non_blocking=self._async)

    def load(self, copies: Sequence[BlockCopy]) -> None:
        """Fill a step's resumed blocks from host memory, in stream order before the forward pass reads them."""
        if not copies:
            return
        blocks, slots = _merged(copies)
        indices, runs = self._indices(blocks), slot_runs(slots)
        for plane in self._planes:
            staged = torch.empty((len(blocks), *plane.host.shape[1:]), dtype=plane.host.dtype, device=self.device)
            for offset, first, length in runs:
                staged[offset : offset + length].copy_(plane.host[first : first + length], non_blocking=self._async)
            plane.cache.index_copy_(0, indices, staged)
