"""Ray Serve deployment that collects every tier replica's latest stats.

Replicas push their ReplicaStats here every metrics interval; the ingress reads the board in
the background to route (saturation, degradation) and at scrape time for /metrics and
/readyz. Routing itself runs in the ingress (deployments/request/routing.py), so a request makes
no extra hop for it. Ingress replicas trade their request-level metrics here too
(deployments/request/metrics.py), so that /metrics counts the whole service whichever replica answers, and keep
every tenant's requests in flight here (deployments/request/tenant_ledger.py), so that a tenant's limit holds for the
whole service.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from thinktier.deployments.request.metrics import IngressSnapshot
from thinktier.deployments.request.tenant_ledger import TenantLedger
from thinktier.deployments.serve_options import ServeOptions, light_options
from thinktier.deployments.tier.replica_stats import ReplicaStats

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle

LOAD_BOARD = "LoadBoard"
"""The deployment's name."""
DEPARTED = "departed"
"""The peer name under which the board returns the counters of Ingress replicas gone for good."""
DEPARTED_AFTER_S = 60.0
"""An Ingress replica silent this long (at least; ten stale periods where that is longer) is gone for good: Serve has
replaced it long before. One that came back after it would have its counters counted twice."""


class LoadBoard:
    """Its methods are `async def` with no await inside: Serve runs them one at a time on the replica's event loop.
    Ray Serve 2.60 would run plain `def` methods in a thread pool, where one call's insert and another's iteration of
    the same dictionary race."""

    @classmethod
    def deployment_options(cls) -> ServeOptions:
        """One light replica (it keeps a dictionary) that every tier replica and Ingress replica calls."""
        return light_options(LOAD_BOARD, max_ongoing_requests=1024)

    def __init__(self, stale_after_s: float, departed_after_s: float | None = None) -> None:
        self._stale_after_s = stale_after_s
        self._stats: dict[str, dict[str, tuple[float, ReplicaStats]]] = {}
        self._ingress: dict[str, tuple[float, IngressSnapshot]] = {}
        self._tenants = TenantLedger(stale_after_s)
        self._departed = IngressSnapshot()
        self._departed_after_s = departed_after_s or max(DEPARTED_AFTER_S, 10 * stale_after_s)

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
        """Keep one Ingress replica's latest request-level metrics (by sequence number: calls may arrive out of order);
        return the other replicas'. A replica that stopped reporting keeps its counters (they stay part of the
        service's totals, which must not go down) but not its gauges (its requests in flight are gone); once it has
        been silent for `departed_after_s`, its counters join the departed total (`DEPARTED`) and its entry goes."""
        now = time.monotonic()
        kept = self._ingress.get(replica)
        self._ingress[replica] = (now, snapshot if kept is None or snapshot.seq >= kept[1].seq else kept[1])
        for gone in [r for r, (at, _) in self._ingress.items() if now - at > self._departed_after_s]:
            self._departed = self._departed.plus(self._ingress.pop(gone)[1])
        peers = {
            other: kept if now - at <= self._stale_after_s else kept.without_gauges()
            for other, (at, kept) in self._ingress.items() if other != replica
        }
        return peers | ({DEPARTED: self._departed} if self._departed.counters else {})

    async def acquire_slot(self, replica: str, tenant: str, limit: int, slot: str) -> bool:
        """Whether Ingress `replica` may start one more request of `tenant` (under `limit` across the service)."""
        return self._tenants.acquire(replica, tenant, limit, slot, time.monotonic())

    async def release_slot(self, replica: str, slot: str) -> None:
        self._tenants.release(replica, slot)

    async def sync_slots(self, replica: str, slots: set[str]) -> None:
        """Ingress `replica` holds or has asked for exactly `slots`; it is live."""
        self._tenants.sync(replica, slots, time.monotonic())


class BoardSlots:
    """An Ingress replica's side of the service-wide tenant count (admission.SharedSlots): asks within the load
    board's timeout; gives back without waiting (the next sync corrects a give-back that was lost)."""

    def __init__(self, board: DeploymentHandle[LoadBoard], replica: str, timeout_s: Callable[[], float]) -> None:
        self._board = board
        self._replica = replica
        self._timeout_s = timeout_s

    async def acquire(self, tenant: str, limit: int, slot: str) -> bool:
        granted: bool = await asyncio.wait_for(
            self._board.acquire_slot.remote(self._replica, tenant, limit, slot), self._timeout_s()
        )
        return granted

    def release(self, slot: str) -> None:
        self._board.release_slot.remote(self._replica, slot)
