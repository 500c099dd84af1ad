"""Tiers that share one pool of capacity, so that their sizes follow the load within the pool's total.

Each tier still scales on its own signal; where the tiers of a pool together want more than the pool holds, the
autoscaler (cluster/shared_capacity.py) splits the total between them by how much each wants, and a tier holding more
than its share gives replicas back for the others. Capacity is counted in devices: GPUs for GPU tiers (a replica holds
engine.tensor_parallel_size x pool.gpu_fraction of them), CPUs for CPU tiers (pool.num_cpus per replica).
"""

from __future__ import annotations

from pydantic import Field

from thinktier.policies.schema.base import StrictModel
from thinktier.policies.schema.tier import Tier


class SharedCapacity(StrictModel):
    """Tiers that run on one pool of devices (one GPU type, or CPUs) and share its total between them."""

    tiers: list[str] = Field(
        min_length=2,
        description="Tiers that share the pool: all GPU tiers of one pool.accelerator_type, or all CPU tiers. Each keeps "
        "its replicas.min and max; the pool's total bounds them together.",
    )
    total: float = Field(
        gt=0,
        description="Devices of the pool that the tiers may hold together: GPUs for GPU tiers (replicas x "
        "engine.tensor_parallel_size x pool.gpu_fraction), CPUs for CPU tiers (replicas x pool.num_cpus). At least "
        "their replicas.min together, and below their replicas.max together (else it never binds).",
    )


def replica_devices(tier: Tier) -> float:
    """Devices of a shared pool that one replica of `tier` holds (see SharedCapacity.total)."""
    if tier.pool.accelerator == "gpu":
        return tier.engine.tensor_parallel_size * tier.pool.gpu_fraction
    return tier.pool.num_cpus
