"""The worker's side of preempt-offload: a host copy of KV blocks, and the copies in and out of the engine's cache.

The copies run on the current stream of the engine's device, before the step's forward pass (vLLM calls
`handle_preemptions` and, for loads the step depends on, `start_load_kv` before it), so in stream order a store reads
blocks before the forward pass overwrites them and a load fills blocks before it reads them; nothing waits on the
host for that, which is what makes the freed blocks safe to reuse at once. A step's copies go together: one gather
per layer of all its blocks, sent through pinned memory without blocking the host. A store's blocks land in their
host slots at the next step's copies (`_settle`), once the device has sent them: with the step in flight (async
scheduling) a wait at the store would stall the engine's loop for a whole step. CPU engines take the same path, without
pinned memory or events.
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


@dataclass
class _Layer:
    cache: torch.Tensor
    host: torch.Tensor
    dim: int


def _merged(copies: Sequence[BlockCopy]) -> tuple[list[int], list[int]]:
    return [b for c in copies for b in c.gpu_blocks], [s for c in copies for s in c.cpu_slots]


@dataclass
class _SentStores:
    """Blocks gathered from the device and on their way to host memory, one tensor per layer, and where they go."""

    slots: torch.Tensor
    per_layer: list[torch.Tensor]
    sent: torch.cuda.Event | None = None


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
        self._async = self.device.type == "cuda"
        self._in_flight: _SentStores | None = None

    def _indices(self, blocks: list[int]) -> torch.Tensor:
        indices = torch.tensor(blocks, dtype=torch.long)
        return indices.pin_memory().to(self.device, non_blocking=True) if self._async else indices

    def _settle(self) -> None:
        """Put the previous step's stored blocks in their host slots (on a GPU, once the device has sent them)."""
        stores, self._in_flight = self._in_flight, None
        if stores is None:
            return
        if stores.sent is not None:
            stores.sent.synchronize()
        for layer, blocks in zip(self._layers, stores.per_layer, strict=True):
            layer.host.index_copy_(layer.dim, stores.slots, blocks)

    def store(self, copies: Sequence[BlockCopy]) -> None:
        """Send a step's preempted blocks towards host memory; they land in their slots at the next `store`/`load`."""
        self._settle()
        if not copies:
            return
        blocks, slots = _merged(copies)
        indices = self._indices(blocks)
        per_layer = [layer.cache.index_select(layer.dim, indices).to("cpu", non_blocking=self._async) for layer in self._layers]
        stores = _SentStores(torch.tensor(slots, dtype=torch.long), per_layer)
        if self._async:
            stores.sent = torch.cuda.current_stream(self.device).record_event()
        self._in_flight = stores

    def load(self, copies: Sequence[BlockCopy]) -> None:
        """Fill a step's resumed blocks from host memory, in stream order before the forward pass reads them."""
        self._settle()  # a request preempted at the last step may resume at this one
        if not copies:
            return
        blocks, slots = _merged(copies)
        indices, host_slots = self._indices(blocks), torch.tensor(slots, dtype=torch.long)
        for layer in self._layers:
            gathered = layer.host.index_select(layer.dim, host_slots)
            if self._async:  # pinned, so the copy does not block the host; PyTorch keeps it until the copy is done
                gathered = gathered.pin_memory()
            layer.cache.index_copy_(layer.dim, indices, gathered.to(self.device, non_blocking=self._async))
