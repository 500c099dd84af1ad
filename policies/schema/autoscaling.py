"""How a tier meets load: the autoscaler's targets, when a request counts as a straggler, how the router weighs replicas."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from thinktier.policies.schema.base import StrictModel


class Autoscaling(StrictModel):
    """Targets of the KV- and straggler-aware autoscaler (per tier)."""

    signal: Literal["kv_and_stragglers", "ongoing_requests"] = Field(
        "ongoing_requests",
        description="What the tier scales on: Ray Serve's default ongoing-requests policy (target_ongoing_requests "
        "per replica, the tier's delays), or thinktier's KV occupancy and stragglers (queue depth as a floor). The "
        "default follows the data: in `thinktier plan` on policies/examples/fleet-h200.yaml (bursty, diurnal load), "
        "ongoing requests at 8 per replica met 94 % of SLOs at 100 replicas and 82 % at 1,000 against 85 % and 67 % "
        "for KV and stragglers, and at 32 per replica it did better than KV and stragglers at both scales for about "
        "the same device-hours (loadtest/results/plan/README.md); on two H200s KV and stragglers missed as many SLOs "
        "for 64 % more GPU time, and on this project's CPU runs it did worse.",
    )
    target_kv_occupancy: float = Field(0.7, gt=0, le=1, description="Scale up when mean KV occupancy stays above this.")
    scale_down_kv_occupancy: float = Field(0.3, ge=0, lt=1, description="Scale down only when KV occupancy stays below this.")
    max_stragglers_per_replica: float = Field(
        2, ge=0,
        description="With signal kv_and_stragglers, scale up when stragglers per replica pass this; with either "
        "signal, the threshold of the ThinktierStragglersAboveLimit alert.",
    )
    target_ongoing_requests: float = Field(8, gt=0, description="Queue-depth floor: replicas >= ongoing / this.")
    upscale_delay_s: float = Field(5, ge=0, description="Condition must hold this long before scaling up.")
    downscale_delay_s: float = Field(30, ge=0, description="Condition must hold this long before scaling down.")
    metrics_interval_s: float = Field(1.0, gt=0, description="How often replicas push their stats.")

    @model_validator(mode="after")
    def _hysteresis(self) -> Autoscaling:
        if self.scale_down_kv_occupancy >= self.target_kv_occupancy:
            raise ValueError(
                f"scale_down_kv_occupancy ({self.scale_down_kv_occupancy}) must be below "
                f"target_kv_occupancy ({self.target_kv_occupancy}) or the tier flaps"
            )
        return self


class Stragglers(StrictModel):
    """When a running request counts as a straggler."""

    thinking_tokens: int = Field(2048, ge=1, description="Past this many thinking tokens.")
    elapsed_s: float = Field(60, gt=0, description="Or running longer than this.")


class RouterWeights(StrictModel):
    """How the tier's request router scores its replicas for each request; the lowest score gets the request.

    Each key names one of the router's scorers (cluster/scorers/), and its weight is in units of "one more request in
    the replica's queue"."""

    queue: float = Field(1.0, ge=0, description="Per request running on or queued at the replica.")
    kv: float = Field(
        2.0, ge=0, description="Times occupancy / headroom of the KV cache: 0.5 at half full, 2.3 at 70%, 49 at 98%."
    )
    straggler: float = Field(
        2.0, ge=0, description="Per straggler on the replica: it holds KV and a batch slot it will not release soon."
    )
    long_running: float = Field(
        3.0, ge=0, description="Per long (hard-class) request on the replica; counted for hard requests only."
    )
