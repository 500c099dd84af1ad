"""The worker's side of preempt-offload: a host copy of KV blocks, and the copies in and out of the engine's cache.

The copies run on the current stream of the engine's device, before the step's forward pass (vLLM calls
`handle_preemptions` and, for loads the step depends on, `start_load_kv` before it): a store reads blocks that the
forward pass is about to overwrite, and a load fills blocks that it reads. Stores finish before they return (the
host copy is synchronous), which is what makes the freed blocks safe to reuse.
"""

from __future__ import annotations

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


@dataclass
class _Layer:
    cache: torch.Tensor
    host: torch.Tensor
    dim: int


class HostKVPool:
    """`num_slots` blocks of every layer's KV in host memory (pinned where the cache is on a GPU)."""

    def __init__(self, kv_caches: dict[str, torch.Tensor], num_blocks: int, num_slots: int) -> None:
        self._layers: list[_Layer] = []
        for cache in kv_caches.values():
            view = _bytes_view(cache)
            dim = block_dim(view, num_blocks)
            shape = list(view.shape)
            shape[dim] = num_slots
            host = torch.empty(shape, dtype=view.dtype, device="cpu", pin_memory=view.device.type == "cuda")
            self._layers.append(_Layer(view, host, dim))
        self.device = next(iter(kv_caches.values())).device

    def store(self, copy: BlockCopy) -> None:
        blocks = torch.tensor(copy.gpu_blocks, dtype=torch.long, device=self.device)
        slots = torch.tensor(copy.cpu_slots, dtype=torch.long)
        for layer in self._layers:
            layer.host.index_copy_(layer.dim, slots, layer.cache.index_select(layer.dim, blocks).to("cpu"))

    def load(self, copy: BlockCopy) -> None:
        blocks = torch.tensor(copy.gpu_blocks, dtype=torch.long, device=self.device)
        slots = torch.tensor(copy.cpu_slots, dtype=torch.long)
        for layer in self._layers:
            layer.cache.index_copy_(layer.dim, blocks, layer.host.index_select(layer.dim, slots).to(self.device))
