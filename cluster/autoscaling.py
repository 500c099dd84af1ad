"""KV- and straggler-aware autoscaling of one tier.

Reasoning traffic breaks the usual signal (ongoing requests per replica): a
replica holding two long reasoning requests can have its KV cache full while
another with twenty short chats is nearly idle. So a tier scales on what
actually runs out: KV cache occupancy and stragglers (long requests that hold KV
and batch slots), with the request count only as a floor.

The decision is `decide_replicas`, a pure function of the previous
`ScalerState`, one `TierSample` and the tier's policy; it imports nothing from
Ray and is tested on recorded metric sequences. `KVAwarePolicy` adapts it to a
Ray Serve custom autoscaling policy, and `serve_autoscaling_config` writes the
deployment's `autoscaling_config` that wires the two together.

Decision, per tick:

* wanted = max(queue floor, KV-driven, straggler-driven), where
  queue floor = ceil(ongoing / target_ongoing_requests),
  KV-driven = ceil(sum of replicas' KV occupancy / target_kv_occupancy) (the
  replicas the tier's KV demand fills to the target), and
  straggler-driven = ceil(stragglers / max_stragglers_per_replica).
  Each term exceeds the current count exactly when its per-replica mean passes
  its target, so scaling up is proportional: a burst that needs three more
  replicas gets them in one step, not in three delays. KV occupancy cannot
  exceed 100%, so on a plateau near 100% the estimate is low; it still asks for
  at least one more replica, and the next step follows one delay later.
* Scale up to `wanted` once it has stayed above the current count for
  `upscale_delay_s`. While replicas from an earlier scale-up are still starting
  (running < target) nothing more is added: their capacity is not in the
  metrics yet, and adding on stale pressure would overshoot. The delay starts
  afresh once they run, which is the scale-up cooldown.
* Scale down by one replica only once, for `downscale_delay_s` without a break,
  mean KV occupancy stayed below `scale_down_kv_occupancy`, the KV and the
  stragglers of the tier would fit on one replica fewer without passing the
  scale-up targets (KV below target, stragglers within half their limit), and
  the queue floor allows it. One at a time, because an engine takes tens of
  seconds to come back; the delay restarts after each step (the scale-down
  cooldown).
* Any sample that breaks a condition resets its timer: input that flaps around
  a threshold never holds long enough to move the replica count.
* The result always lies within [min, max]; a count outside them is corrected at
  once.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.schema import Autoscaling, Replicas, Tier

if TYPE_CHECKING:
    from ray.serve.config import AutoscalingContext
    from ray.serve.request_router import ReplicaID

POLICY_IMPORT_PATH = "thinktier.cluster.autoscaling:KVAwarePolicy"
STATE_KEY = "thinktier"
"""Key of this policy's state in Ray Serve's per-deployment `policy_state` dict."""
LOOK_BACK_INTERVALS = 3
"""Ray averages each replica's metrics over this many push intervals; the delays do the smoothing."""
STRAGGLER_SCALE_DOWN_SHARE = 0.5
"""Scale down only if the stragglers fit within this share of their per-replica limit on one replica fewer."""
_EPS = 1e-9


@dataclass(frozen=True)
class TierSample:
    """What the tier looks like at one autoscaling tick."""

    reports: tuple[ReplicaStats, ...]
    """Stats of the running replicas that have reported (replicas still starting have not)."""
    ongoing_requests: float
    """Requests running on or queued for the tier's replicas."""
    target_replicas: int
    """The replica count decided last tick (the one being converged to)."""
    running_replicas: int
    """Replicas running now; below `target_replicas` while a scale-up is in flight."""

    @property
    def kv_demand(self) -> float:
        """Sum of KV occupancy: how many replicas' worth of KV cache the tier uses."""
        return sum(r.kv_occupancy for r in self.reports)

    @property
    def mean_kv_occupancy(self) -> float:
        return self.kv_demand / len(self.reports) if self.reports else 0.0

    @property
    def stragglers(self) -> int:
        return sum(r.num_stragglers for r in self.reports)

    @property
    def starting(self) -> bool:
        """A scale-up is still in flight: replicas were asked for but do not run yet."""
        return self.running_replicas < self.target_replicas

    @property
    def fully_reported(self) -> bool:
        return len(self.reports) >= self.running_replicas


@dataclass(frozen=True)
class ScalerState:
    """What the policy remembers between ticks."""

    up_since: float | None = None
    """When the wish to scale up started holding without a break."""
    down_since: float | None = None
    """When the conditions to scale down started holding without a break."""
    reason: str = "start"
    """Why the last decision was made (for logs and dashboards)."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ScalerState:
        return cls(**data) if data else cls()


def _ceil(x: float) -> int:
    """Ceiling that ignores float noise (0.7 * 3 / 0.7 must be 3, not 4)."""
    return math.ceil(x - _EPS)


def wanted_replicas(sample: TierSample, targets: Autoscaling) -> int:
    """Replicas that bring every signal back to its target: max of queue floor, KV- and straggler-driven counts."""
    queue_floor = _ceil(sample.ongoing_requests / targets.target_ongoing_requests)
    kv_driven = _ceil(sample.kv_demand / targets.target_kv_occupancy)
    if targets.max_stragglers_per_replica > 0:
        straggler_driven = _ceil(sample.stragglers / targets.max_stragglers_per_replica)
    else:
        straggler_driven = sample.target_replicas + 1 if sample.stragglers else 0
    return max(queue_floor, kv_driven, straggler_driven)


def _can_shed_one(sample: TierSample, targets: Autoscaling, wanted: int) -> str | None:
    """Why one replica fewer would do (None when it would not)."""
    fewer = sample.target_replicas - 1
    if sample.starting or not sample.fully_reported or not sample.reports:
        return None
    if wanted > fewer or sample.mean_kv_occupancy >= targets.scale_down_kv_occupancy:
        return None
    if fewer == 0:
        return "idle"  # wanted <= 0: no requests, no KV in use, no stragglers
    if sample.kv_demand / fewer >= targets.target_kv_occupancy:
        return None
    if sample.stragglers > fewer * targets.max_stragglers_per_replica * STRAGGLER_SCALE_DOWN_SHARE:
        return None
    return f"kv {sample.mean_kv_occupancy:.2f} < {targets.scale_down_kv_occupancy}, {sample.stragglers} stragglers"


def decide_replicas(
    state: ScalerState, sample: TierSample, targets: Autoscaling, replicas: Replicas, now: float
) -> tuple[int, ScalerState]:
    """The tier's replica count for this tick, and the state for the next one (see the module docstring)."""
    current = sample.target_replicas
    if not replicas.min <= current <= replicas.max:
        bounded = min(max(current, replicas.min), replicas.max)
        return bounded, ScalerState(reason=f"bounds [{replicas.min}, {replicas.max}]")

    wanted = wanted_replicas(sample, targets)
    if wanted > current and current < replicas.max:
        if sample.starting:
            return current, ScalerState(reason="scale-up in flight")
        up_since = state.up_since if state.up_since is not None else now
        if now - up_since + _EPS >= targets.upscale_delay_s:
            new = min(wanted, replicas.max)
            return new, ScalerState(reason=f"up {current}->{new}: {_pressure(sample, targets)}")
        return current, ScalerState(up_since=up_since, reason=f"up pending: {_pressure(sample, targets)}")

    why_down = _can_shed_one(sample, targets, wanted) if current > replicas.min else None
    if why_down is not None:
        down_since = state.down_since if state.down_since is not None else now
        if now - down_since + _EPS >= targets.downscale_delay_s:
            return current - 1, ScalerState(reason=f"down {current}->{current - 1}: {why_down}")
        return current, ScalerState(down_since=down_since, reason=f"down pending: {why_down}")
    return current, ScalerState(reason="steady")


def _pressure(sample: TierSample, targets: Autoscaling) -> str:
    return (
        f"ongoing {sample.ongoing_requests:g} (target {targets.target_ongoing_requests:g}/replica), "
        f"kv {sample.mean_kv_occupancy:.2f} (target {targets.target_kv_occupancy}), "
        f"{sample.stragglers} stragglers (limit {targets.max_stragglers_per_replica:g}/replica)"
    )


def tier_sample(ctx: AutoscalingContext) -> TierSample:
    """The sample Ray Serve's autoscaling context holds: each running replica's `record_autoscaling_stats`
    values (averaged over the look-back window) and the tier's ongoing requests."""
    metrics = ctx.aggregated_metrics or {}
    per_replica: dict[ReplicaID, dict[str, float]] = {}
    for name, by_replica in metrics.items():
        for replica_id, value in by_replica.items():
            per_replica.setdefault(replica_id, {})[name] = value
    reports = tuple(ReplicaStats.from_metrics(per_replica[r]) for r in ctx.running_replicas if r in per_replica)
    return TierSample(
        reports=reports,
        ongoing_requests=float(ctx.total_num_requests),
        target_replicas=ctx.target_num_replicas,
        running_replicas=ctx.current_num_replicas,
    )


class KVAwarePolicy:
    """Ray Serve custom autoscaling policy of one tier, around `decide_replicas`.

    Ray Serve instantiates a class given as `policy_function` once per deployment with
    `policy_kwargs` (here: the tier's `Autoscaling` section) and calls the instance every
    tick; a plain function would get no parameters. The state between ticks lives in
    Ray's `policy_state` (under `STATE_KEY`), not in the instance, so a controller that
    rebuilds the policy resumes where it was. Min and max come from the context:
    Ray has already adjusted them for the application's target capacity.
    """

    def __init__(self, **autoscaling: object) -> None:
        self.targets = Autoscaling.model_validate(autoscaling)

    def __call__(self, ctx: AutoscalingContext) -> tuple[int, dict[str, Any]]:
        if ctx.capacity_adjusted_max_replicas == 0:
            return 0, dict(ctx.policy_state)
        bounds = Replicas(min=ctx.capacity_adjusted_min_replicas, max=ctx.capacity_adjusted_max_replicas)
        state = ScalerState.from_dict(ctx.policy_state.get(STATE_KEY))
        now = ctx.current_time if ctx.current_time is not None else time.time()
        decision, new_state = decide_replicas(state, tier_sample(ctx), self.targets, bounds, now)
        return decision, {**ctx.policy_state, STATE_KEY: new_state.as_dict()}


def serve_autoscaling_config(tier: Tier) -> dict[str, Any]:
    """The deployment's `autoscaling_config` (Serve config file form) that runs `KVAwarePolicy` on the tier's targets
    (or, with `signal: ongoing_requests`, Ray Serve's default request-count policy).

    Ray Serve applies `upscale_delay_s`/`downscale_delay_s` of this config on top of any custom
    policy; they are 0 here because the policy applies the tier's own delays (with its hysteresis),
    and doing both would double them.
    """
    targets = tier.autoscaling
    replicas = tier.replicas
    config = {
        "min_replicas": replicas.min,
        "max_replicas": replicas.max,
        "initial_replicas": replicas.initial if replicas.initial is not None else replicas.min,
        "metrics_interval_s": targets.metrics_interval_s,
        "look_back_period_s": LOOK_BACK_INTERVALS * targets.metrics_interval_s,
        "target_ongoing_requests": targets.target_ongoing_requests,
    }
    if targets.signal == "ongoing_requests":  # Ray Serve's default policy, with the tier's delays
        return config | {"upscale_delay_s": targets.upscale_delay_s, "downscale_delay_s": targets.downscale_delay_s}
    return config | {
        "upscale_delay_s": 0,
        "downscale_delay_s": 0,
        "policy": {"policy_function": POLICY_IMPORT_PATH, "policy_kwargs": targets.model_dump()},
    }
