"""The Ingress's copy of the load board's view, with its age.

Routing sheds, degrades and fails over on this view, so it must not act on old data: when the board has not
answered for longer than the board itself keeps a replica's report, the view is stale and routing acts as if it
knew no load (no shedding, no degradation, no tier counted down) until a read succeeds again. Serving on without load
information is the lesser harm than shedding or failing over on numbers that may be minutes old.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from prometheus_client import Counter

from thinktier.deployments.request.routing import TierLoad
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.schema import Policy

logger = logging.getLogger("ray.serve")
STALE_AFTER_INTERVALS = 5
"""A replica's report (on the board) and the board's view (in the Ingress) count this many stats intervals."""


def stale_after_s(policy: Policy) -> float:
    """How long a report or a view stays current: STALE_AFTER_INTERVALS of the longest stats interval."""
    return STALE_AFTER_INTERVALS * max(tier.autoscaling.metrics_interval_s for tier in policy.tiers.values())


@dataclass
class RoutingView:
    max_age_s: float
    stats: dict[str, dict[str, ReplicaStats]] = field(default_factory=dict)
    """Latest stats by tier and replica id, as the board last gave them (also what /metrics reports)."""
    read_at: float | None = None
    """time.monotonic() of the last successful read; None before the first."""
    dead: set[str] = field(default_factory=set)
    """Replicas whose engine a tier call found dead: left out of the view even while the board still lists them."""

    def update(self, stats: dict[str, dict[str, ReplicaStats]], now: float) -> None:
        listed = {replica for replicas in stats.values() for replica in replicas}
        self.dead &= listed  # once the board has dropped a dead replica, its id need not be kept
        self.stats = {tier: {r: s for r, s in replicas.items() if r not in self.dead} for tier, replicas in stats.items()}
        self.read_at = now

    def engine_died(self, tier: str, replica: str) -> bool:
        """A call found `replica`'s engine dead: route nothing more to it. Whether the tier has another live replica
        (worth retrying the call on)."""
        self.dead.add(replica)
        self.stats.get(tier, {}).pop(replica, None)
        return bool(self.stats.get(tier))

    def fresh(self, now: float) -> bool:
        return self.read_at is not None and now - self.read_at <= self.max_age_s

    def loads(self, now: float) -> dict[str, TierLoad]:
        """Each tier's load; none while the view is stale (routing then neither sheds nor degrades)."""
        if not self.fresh(now):
            return {}
        return {tier: TierLoad(tuple(replicas.values())) for tier, replicas in self.stats.items()}

    def down(self, tier: str | None, now: float) -> bool:
        """Whether the board has seen `tier` and now lists no live replica of it; never on a stale view."""
        return self.fresh(now) and tier in self.stats and not self.stats[tier]


@dataclass
class BoardCalls:
    """The outcome of each round of the Ingress's calls to the load board: failed calls are counted by name, and the
    log says when the board starts failing and when it answers again (not once per round)."""

    errors: Counter
    """thinktier_load_board_errors_total, labelled by call."""
    stale_after_s: float
    failing: bool = False

    def round(self, answered: dict[str, bool]) -> None:
        failed = [call for call, ok in answered.items() if not ok]
        for call in failed:
            self.errors.labels(call).inc()
        if bool(failed) == self.failing:
            return
        self.failing = bool(failed)
        if failed:
            logger.warning("the load board did not answer (%s); routing uses its last view until it is %g s old, then "
                           "routes without load information", ", ".join(failed), self.stale_after_s)
        else:
            logger.info("the load board answers again")
