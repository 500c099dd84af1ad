"""Tier sizes that follow the load within a shared pool's total (the policy's `shared_capacity`).

Each tier of a pool first decides alone, as it would without the pool: `KVAwarePolicy` for `signal:
kv_and_stragglers`, Ray Serve's default request-count policy for `signal: ongoing_requests`. `share_pool` then fits
those wishes into the pool's total, a pure function of one tick tested on its own and run by `thinktier plan` too:

* Each tier's share: every tier starts at its min, then the rest of the total goes one replica at a time to the tier
  that has the smallest part of what it wants, until every wish is met or no replica fits. When the wishes fit the
  total, each share is the wish itself.
* A tier grows only into devices no tier holds now (the total less every tier's current target, replicas still
  starting included), and not beyond its share; where several grow, the same one-at-a-time rule splits what is free.
  So the tiers never hold more than the total together, whatever a later delay holds back.
* A tier holding more than its share while another cannot reach its own gives replicas back, down to its share, once
  that has held for its `autoscaling.downscale_delay_s` (`give_back_delay_s` here): the owner of a replica is not
  disturbed by a moment's burst elsewhere. The devices it frees are granted on a later tick, once its target is lower.

`SharedCapacityPolicy` is the Ray Serve application-level autoscaling policy around it (Ray 2.60's
`ServeApplicationSchema.autoscaling_policy`): one call per tick with every deployment's `AutoscalingContext`, so one
decision sees all tiers of a pool. It runs each deployment's own configured policy for its wish (nothing is
duplicated), and Ray applies each deployment's own `autoscaling_config` afterwards (bounds, and the up/down delays,
which are the tier's with `signal: ongoing_requests` and 0 with `kv_and_stragglers`, whose policy applies them itself);
that is why `give_back_delay_s` is 0 for `ongoing_requests` tiers: Ray's downscale delay already holds any lower target.
Ray takes an application-level policy only from a Serve config (`serve deploy`, the RayService's serveConfigV2), not
from `serve.run`; `serve_config.serve_application` writes it, and the local launcher deploys that config when the
policy shares capacity.
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from thinktier.deployments.tier.tier import tier_deployment_name
from thinktier.policies.schema import Policy, Tier, replica_devices

if TYPE_CHECKING:
    from ray.serve._private.common import DeploymentID
    from ray.serve.config import AutoscalingContext

POLICY_IMPORT_PATH = "thinktier.cluster.shared_capacity:SharedCapacityPolicy"
POOL_KEY = "thinktier_pool"
"""Key of the pool's per-tier state in Ray Serve's per-deployment policy state."""
_EPS = 1e-9


@dataclass(frozen=True)
class PoolTier:
    """One tier of a shared pool at one tick."""

    name: str
    current: int
    """The tier's target replica count decided last tick (replicas still starting included)."""
    wanted: int
    """What the tier's own autoscaling decided this tick, within [min, its max]."""
    min: int
    devices: float
    """Devices of the pool one replica holds (`replica_devices`)."""
    give_back_delay_s: float
    """How long another tier must have been short of its share before this one gives replicas back."""
    give_back_since: float | None = None
    """When this tier, above its share, started being asked to give back (None while it is not)."""


@dataclass(frozen=True)
class PoolDecision:
    replicas: int
    share: int
    give_back_since: float | None
    reason: str


def _fill(tiers: Sequence[PoolTier], start: Mapping[str, int], caps: Mapping[str, int], free: float) -> dict[str, int]:
    """From `start`, one replica at a time to the tier with the smallest part of its cap, while one fits in `free`
    devices and some tier is below its cap."""
    counts = dict(start)
    while True:
        open_ = [t for t in tiers if counts[t.name] < caps[t.name] and t.devices <= free + _EPS]
        if not open_:
            return counts
        tier = min(open_, key=lambda t: (counts[t.name] / caps[t.name], -t.wanted, t.name))
        counts[tier.name] += 1
        free -= tier.devices


def fair_shares(tiers: Sequence[PoolTier], total: float) -> dict[str, int]:
    """Each tier's share of `total`: its min, then one replica at a time to the tier with the smallest part of its wish."""
    return _fill(tiers, {t.name: t.min for t in tiers}, {t.name: t.wanted for t in tiers},
                 total - sum(t.min * t.devices for t in tiers))


def share_pool(tiers: Sequence[PoolTier], total: float, now: float) -> dict[str, PoolDecision]:
    """Every tier's replica count for this tick within the pool's `total` (see the module docstring)."""
    shares = fair_shares(tiers, total)
    # What each tier may hold now: growth only into devices no tier holds, each up to its share, the most starved first.
    caps = {t.name: min(t.wanted, shares[t.name]) for t in tiers}
    grants = _fill(tiers, {t.name: t.current for t in tiers}, caps, total - sum(t.current * t.devices for t in tiers))
    short = [t.name for t in tiers if grants[t.name] < caps[t.name]]
    decisions = {}
    for t in tiers:
        share, granted = shares[t.name], grants[t.name]
        own = min(t.wanted, granted)
        if not short or t.current <= share or t.name in short:
            reason = "own decision" if own == t.wanted else f"held at {own} by the pool (share {share}, wants {t.wanted})"
            decisions[t.name] = PoolDecision(own, share, None, reason)
            continue
        since = t.give_back_since if t.give_back_since is not None else now
        if now - since + _EPS >= t.give_back_delay_s:
            decisions[t.name] = PoolDecision(min(own, share), share, since, f"gives back to its share {share} for {short}")
        else:
            decisions[t.name] = PoolDecision(own, share, since, f"give-back to {share} pending for {short}")
    return decisions


# ---- Ray Serve ---------------------------------------------------------------------------------------------------

OwnPolicy = Callable[["AutoscalingContext"], tuple[float, dict[str, Any]]]


def give_back_delay_s(tier: Tier) -> float:
    """How long a tier above its share waits before giving back: its downscale delay, which Ray Serve itself applies
    to any lower target of a tier on its default policy (`signal: ongoing_requests`), so 0 is left to apply here."""
    return 0.0 if tier.autoscaling.signal == "ongoing_requests" else tier.autoscaling.downscale_delay_s


def pool_kwargs(policy: Policy) -> dict[str, Any]:
    """`SharedCapacityPolicy`'s constructor arguments (JSON, as Ray Serve's `policy_kwargs` must be)."""
    return {
        "pools": [
            {
                "total": pool.total,
                "tiers": {
                    tier_deployment_name(name): {
                        "devices": replica_devices(policy.tiers[name]),
                        "give_back_delay_s": give_back_delay_s(policy.tiers[name]),
                    }
                    for name in pool.tiers
                },
            }
            for pool in policy.shared_capacity
        ]
    }


def serve_application_policy(policy: Policy) -> dict[str, Any]:
    """The application's `autoscaling_policy` (Serve config file form) for the policy's shared pools."""
    return {"policy_function": POLICY_IMPORT_PATH, "policy_kwargs": pool_kwargs(policy)}


class SharedCapacityPolicy:
    """Ray Serve application-level autoscaling policy: each deployment's own policy, then `share_pool` per pool.

    Ray instantiates it once per application with `pools` (from `pool_kwargs`) and calls it every tick with every
    autoscaling deployment's context. A pool whose tiers are not all registered yet (a deploy in progress) lets none
    of them grow, since the devices of the missing ones are unknown."""

    def __init__(self, pools: list[dict[str, Any]]) -> None:
        self.pools = pools
        self.own_policies: dict[DeploymentID, OwnPolicy] = {}

    def own_policy(self, deployment: DeploymentID, ctx: AutoscalingContext) -> OwnPolicy:
        """The deployment's configured policy, made callable as Ray Serve makes it (a class is instantiated once)."""
        if deployment not in self.own_policies:
            if ctx.config is None:  # Ray Serve registers only deployments with an autoscaling_config
                raise ValueError(f"deployment {deployment.name} autoscales without an autoscaling_config")
            configured = ctx.config.policy
            raw = configured.get_policy()
            self.own_policies[deployment] = cast(OwnPolicy, raw(**configured.policy_kwargs) if inspect.isclass(raw) else raw)
        return self.own_policies[deployment]

    def __call__(
        self, contexts: dict[DeploymentID, AutoscalingContext]
    ) -> tuple[dict[DeploymentID, int | float], dict[DeploymentID, dict[str, Any]]]:
        decisions: dict[DeploymentID, int | float] = {}
        states: dict[DeploymentID, dict[str, Any]] = {}
        for deployment, ctx in contexts.items():
            decisions[deployment], states[deployment] = self.own_policy(deployment, ctx)(ctx)
        for pool in self.pools:
            members = {d: ctx for d, ctx in contexts.items() if d.name in pool["tiers"]}
            if len(members) < len(pool["tiers"]):
                decisions |= {d: min(decisions[d], ctx.target_num_replicas) for d, ctx in members.items()}
                continue
            tiers = [pool_tier(ctx, decisions[d], pool["tiers"][d.name]) for d, ctx in members.items()]
            shared = share_pool(tiers, pool["total"], ctx_now(members))
            for d in members:
                decision = shared[d.name]
                decisions[d] = decision.replicas
                states[d] = {**states[d], POOL_KEY: {"give_back_since": decision.give_back_since, "share": decision.share,
                                                     "reason": decision.reason}}
        return decisions, states


def pool_tier(ctx: AutoscalingContext, own: float, tier: Mapping[str, float]) -> PoolTier:
    """A deployment of a pool as `share_pool` sees it: its own policy's wish, within its current bounds."""
    low, high = ctx.capacity_adjusted_min_replicas, ctx.capacity_adjusted_max_replicas
    wanted = min(max(math.ceil(own), low), high)
    state = ctx.policy_state.get(POOL_KEY) or {}
    return PoolTier(ctx.deployment_name, ctx.target_num_replicas, wanted, low, tier["devices"],
                    tier["give_back_delay_s"], state.get("give_back_since"))


def ctx_now(contexts: Mapping[DeploymentID, AutoscalingContext]) -> float:
    """The tick's time, as Ray Serve stamps each context."""
    return min((ctx.current_time for ctx in contexts.values() if ctx.current_time is not None), default=time.time())
