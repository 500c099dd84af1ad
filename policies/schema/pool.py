"""Where a tier's replicas run and how many run: the pool's resources and the replica range."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from thinktier.policies.schema.base import StrictModel

Accelerator = Literal["cpu", "gpu"]


class Pool(StrictModel):
    """Where a tier's replicas run: the Ray resources of one replica and the Kubernetes node pool."""

    accelerator: Accelerator = Field("cpu", description="'gpu' replicas ask Ray for GPUs and run CUDA vLLM.")
    accelerator_type: str | None = Field(None, description="Ray accelerator type, e.g. 'H100' (GPU pools).")
    num_cpus: float = Field(1.0, gt=0, description="Ray CPUs per replica.")
    memory_gib: float = Field(4.0, gt=0, description="Host memory per replica, GiB (KV offload buffers included).")
    gpu_fraction: float = Field(
        1.0,
        gt=0,
        le=1,
        description="GPU pools: share of one GPU a replica asks Ray for. Below 1, replicas of several tiers share a GPU "
        "(e.g. a light chat tier beside a reasoning replica); needs engine.tensor_parallel_size 1 and "
        "engine.gpu_memory_utilization no larger than this share. On Kubernetes each pod still gets one whole GPU.",
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="Kubernetes node selector of the pool.")
    tolerations: list[dict[str, str]] = Field(default_factory=list, description="Kubernetes tolerations of the pool.")


class Replicas(StrictModel):
    """How many replicas of a tier run: the autoscaler moves between min and max."""

    min: int = Field(1, ge=0, description="Fewest replicas the autoscaler keeps.")
    max: int = Field(1, ge=1, description="Most replicas the autoscaler may start.")
    initial: int | None = Field(None, ge=0, description="Replicas at start; min when unset.")

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        if self.initial is not None and not self.min <= self.initial <= self.max:
            raise ValueError(f"initial ({self.initial}) must lie within [min, max] = [{self.min}, {self.max}]")
        return self
