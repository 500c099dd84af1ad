"""Ray Serve deployment that collects every tier replica's latest stats.

Replicas push their ReplicaStats here every metrics interval; the ingress reads the board in
the background to route (saturation, degradation) and at scrape time for /metrics and
/readyz. Routing itself runs in the ingress (deployments/request/routing.py), so a request makes
no extra hop for it. Ingress replicas trade their request-level metrics here too
(deployments/request/metrics.py), so that /metrics counts the whole service whichever replica answers.
"""

from __future__ import annotations

import time

from thinktier.deployments.request.metrics import IngressSnapshot
from thinktier.deployments.serve_options import ServeOptions, light_options
from thinktier.deployments.tier.replica_stats import ReplicaStats

LOAD_BOARD = "LoadBoard"
"""The deployment's name."""


class LoadBoard:
    """Its methods are `async def` with no await inside: Serve runs them one at a time on the replica's event loop.
    Ray Serve 2.60 would run plain `def` methods in a thread pool, where one call's insert and another's iteration of
    the same dictionary race."""

    @classmethod
    def deployment_options(cls) -> ServeOptions:
        """One light replica (it keeps a dictionary) that every tier replica and Ingress replica calls."""
        return light_options(LOAD_BOARD, max_ongoing_requests=1024)

    def __init__(self, stale_after_s: float) -> None:
        self._stale_after_s = stale_after_s
        self._stats: dict[str, dict[str, tuple[float, ReplicaStats]]] = {}
        self._ingress: dict[str, tuple[float, IngressSnapshot]] = {}

    async def report(self, tier: str, replica: str, stats: ReplicaStats) -> None:
        self._stats.setdefault(tier, {})[replica] = (time.monotonic(), stats)

    async def forget(self, tier: str, replica: str) -> None:
        """A replica whose engine died: out of the view at once, not after it goes stale."""
        self._stats.get(tier, {}).pop(replica, None)

    async def replica_stats(self) -> dict[str, dict[str, ReplicaStats]]:
        """Latest stats by tier and replica id; a replica that stopped reporting drops out."""
        now = time.monotonic()
        for tier, replicas in self._stats.items():
            self._stats[tier] = {r: (t, s) for r, (t, s) in replicas.items() if now - t <= self._stale_after_s}
        return {tier: {r: s for r, (_, s) in replicas.items()} for tier, replicas in self._stats.items()}

    async def exchange_ingress_metrics(self, replica: str, snapshot: IngressSnapshot) -> dict[str, IngressSnapshot]:
        """Keep one Ingress replica's latest request-level metrics; return the other replicas'. A replica that stopped
        reporting keeps its counters (they stay part of the service's totals, which must not go down) but not its
        gauges (its requests in flight are gone)."""
        now = time.monotonic()
        self._ingress[replica] = (now, snapshot)
        return {
            other: kept if now - at <= self._stale_after_s else kept.without_gauges()
            for other, (at, kept) in self._ingress.items() if other != replica
        }
