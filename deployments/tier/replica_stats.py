"""What a tier replica reports about its engine, to the autoscaler, the request router and Prometheus."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class ReplicaStats:
    """One replica's engine state. Keys of `as_metrics()` are what `record_autoscaling_stats` and
    `record_routing_stats` return, so the autoscaling policy and request router read them by name."""

    kv_occupancy: float = 0.0
    """Share of the KV cache in use, 0..1 (vLLM's kv_cache_usage)."""
    num_running: int = 0
    num_waiting: int = 0
    num_stragglers: int = 0
    """Running requests past the policy's straggler limit (thinking tokens or elapsed time)."""
    num_long_running: int = 0
    """Running requests of the hard class (the ones that will grow long)."""
    num_borrowed: int = 0
    """Decodes of borrowed requests: another tier's, run on capacity this tier lends (policy `lending`)."""
    num_preemptions_total: int = 0
    prefix_cache_queries_total: int = 0
    """Prompt tokens looked up in the prefix cache since the engine started."""
    prefix_cache_hits_total: int = 0
    """Of those, tokens found in the cache."""
    kv_offload_stored_bytes_total: int = 0
    """KV bytes copied to host memory (engine.kv_offloading, either mode)."""
    kv_offload_loaded_bytes_total: int = 0
    """KV bytes copied back from host memory."""
    preemptions_resumed_from_host_total: int = 0
    """Preempted requests that resumed from KV kept in host memory instead of recomputing (mode 'preempted')."""
    preempted_tokens_total: int = 0
    """Prompt and output tokens of preempted requests at their preemption (mode 'preempted')."""
    kv_offload_loaded_tokens_total: int = 0
    """Of those, tokens loaded back from host memory on resume instead of recomputed (mode 'preempted')."""
    preempted_tokens_recomputed_total: int = 0
    """Of those, tokens computed again on resume: neither in the prefix cache nor loaded (mode 'preempted')."""

    def as_metrics(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}

    @classmethod
    def from_metrics(cls, metrics: dict[str, float]) -> ReplicaStats:
        known = {k: metrics[k] for k in cls.__dataclass_fields__ if k in metrics}
        ints = {k: int(v) for k, v in known.items() if k != "kv_occupancy"}
        return cls(kv_occupancy=float(known.get("kv_occupancy", 0.0)), **ints)
