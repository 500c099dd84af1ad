"""`PreemptOffloadConnector`: the planner and the host pool behind vLLM's KV connector interface (`kv_connector_v1`).

vLLM builds one instance in its scheduler (role SCHEDULER: the planner) and one per worker (role WORKER: the host
pool). The engine arguments name it by module path; `kv_connector_extra_config.host_bytes` sizes the host pool of
the replica, shared out over its tensor-parallel ranks.
Written against vLLM 0.24 (the GPU image) and checked on 0.32 (the CPU wheel): the interface parts it uses are the
same in both. Models with more than one KV cache group (hybrid attention, Mamba) are refused at start.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorMetadata, KVConnectorRole
from vllm.distributed.kv_transfer.kv_connector.v1.metrics import KVConnectorStats

from thinktier.deployments.tier.kv_offload import HOST_BYTES
from thinktier.deployments.tier.kv_offload.copier import HostKVPool
from thinktier.deployments.tier.kv_offload.planner import (
    COUNTER_PREFIX,
    LOAD_BYTES,
    STORE_BYTES,
    OffloadCounters,
    PreemptedKVPlanner,
    Scheduled,
    StepCopies,
)

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.request import Request

@dataclass
class PreemptOffloadMetadata(KVConnectorMetadata):
    """The copies the scheduler planned for one step, sent to the workers."""

    copies: StepCopies = field(default_factory=StepCopies)


@dataclass
class PreemptOffloadStats(KVConnectorStats):
    """Counters since the last report, as `{"data": {name: {"": value}}}` (the layout vLLM's offloading connector
    uses, which the tier replica already reads for bytes moved)."""

    def __post_init__(self) -> None:
        self.data.setdefault("data", {})

    def reset(self) -> None:
        self.data = {"data": {}}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for name, values in other.data.get("data", {}).items():
            mine = self.data["data"].setdefault(name, {})
            for label, value in values.items():
                mine[label] = mine.get(label, 0) + value
        return self

    def reduce(self) -> dict[str, int | float]:
        return {name: sum(values.values()) for name, values in self.data["data"].items()}

    def is_empty(self) -> bool:
        return not any(self.reduce().values())


def _stats(counters: OffloadCounters, bytes_per_block: int) -> PreemptOffloadStats:
    data: dict[str, dict[str, float]] = {COUNTER_PREFIX + k: {"": v} for k, v in asdict(counters).items()}
    data[STORE_BYTES] = {"": counters.blocks_stored * bytes_per_block}
    data[LOAD_BYTES] = {"": counters.blocks_loaded * bytes_per_block}
    return PreemptOffloadStats(data={"data": data})


class PreemptOffloadConnector(KVConnectorBase_V1):
    """Preempted requests' KV kept in host memory and loaded back on resume; see the package docstring."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: KVCacheConfig) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        groups = kv_cache_config.kv_cache_groups
        if len(groups) != 1:
            raise ValueError(
                f"engine.kv_offloading.mode 'preempted' supports models with one KV cache group; this model has "
                f"{len(groups)} (hybrid attention); use mode 'native' or 'off'"
            )
        self._num_blocks = kv_cache_config.num_blocks
        self._bytes_per_block = sum(t.size for t in kv_cache_config.kv_cache_tensors) // self._num_blocks
        extra = self._kv_transfer_config.kv_connector_extra_config or {}
        ranks = vllm_config.parallel_config.world_size  # each rank holds its share of every block, and of the pool
        self._num_slots = int(extra[HOST_BYTES]) // (self._bytes_per_block * ranks)
        self._planner = PreemptedKVPlanner(self._num_slots, groups[0].kv_cache_spec.block_size)
        self._requests: dict[str, Request] = {}
        self._pool: HostKVPool | None = None

    @property
    def requires_kv_delivery(self) -> bool:
        """No: a copy not made is only a recompute (vLLM 0.32 asks; its default follows the producer role, which this
        connector takes only to keep vLLM from deferring block frees, see `KV_ROLE`)."""
        return False

    # scheduler side

    def get_num_new_matched_tokens(self, request: Request, num_computed_tokens: int) -> tuple[int | None, bool]:
        self._requests[request.request_id] = request
        return self._planner.stored_tokens(request.request_id, request.num_tokens, num_computed_tokens), False

    def update_state_after_alloc(self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int) -> None:
        self._planner.loading(request.request_id, list(blocks.get_block_ids()[0]), request.num_tokens, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        preempted = [
            (rid, self._requests[rid].num_tokens)
            for rid in scheduler_output.preempted_req_ids or ()
            if rid in self._requests
        ]
        tokens = scheduler_output.num_scheduled_tokens
        scheduled = [
            Scheduled(r.req_id, list(r.block_ids[0]), True, r.num_computed_tokens + tokens.get(r.req_id, 0))
            for r in scheduler_output.scheduled_new_reqs
        ]
        cached = scheduler_output.scheduled_cached_reqs
        for rid, blocks, computed in zip(cached.req_ids, cached.new_block_ids, cached.num_computed_tokens, strict=True):
            new_blocks = None if blocks is None else list(blocks[0])
            scheduled.append(Scheduled(rid, new_blocks, rid in cached.resumed_req_ids, computed + tokens.get(rid, 0)))
        return PreemptOffloadMetadata(self._planner.step(preempted, scheduled))

    def request_finished(self, request: Request, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        self._requests.pop(request.request_id, None)
        self._planner.finished(request.request_id)
        return False, None

    def get_kv_connector_stats(self) -> KVConnectorStats | None:
        if self.role != KVConnectorRole.SCHEDULER:
            return None
        counters = self._planner.take_counters()
        return None if counters.is_empty() else _stats(counters, self._bytes_per_block)

    @classmethod
    def build_kv_connector_stats(cls, data: dict[str, Any] | None = None) -> KVConnectorStats | None:
        return PreemptOffloadStats(data=data or {"data": {}})

    # worker side

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self._pool = HostKVPool(kv_caches, self._num_blocks, self._num_slots)

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        assert isinstance(kv_connector_metadata, PreemptOffloadMetadata) and self._pool is not None
        self._pool.store(kv_connector_metadata.copies.stores)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        metadata = self._get_connector_metadata()
        assert isinstance(metadata, PreemptOffloadMetadata) and self._pool is not None
        self._pool.load(metadata.copies.loads)

    def wait_for_layer_load(self, layer_name: str) -> None:
        """Loads finish in start_load_kv, before the forward pass."""

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor, attn_metadata: Any, **kwargs: Any) -> None:
        """Nothing is saved as it is computed: only a preemption stores."""

    def wait_for_save(self) -> None:
        """Stores are ordered before the forward pass in handle_preemptions; they reach their host slots at the next
        step's copies (copier.HostKVPool)."""
