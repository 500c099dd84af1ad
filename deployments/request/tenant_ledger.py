"""Every tenant's requests in flight across all Ingress replicas, kept by the load board, so that a tenant's
`max_concurrent_requests` holds for the service whatever the number of Ingress replicas.

Each slot has an id. An Ingress replica asks for a slot before it starts a request (`acquire`) and gives it back when
the request ends (`release`, sent without waiting for an answer). Once a second it also sends the ids it holds or has
asked for (`sync`): the ledger keeps only those of that replica's slots, so a lost release is corrected within a
second and a grant that is still on its way back is never dropped. A replica that stops syncing (it died) loses its
slots after `stale_after_s`."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class _Replica:
    synced_at: float
    slots: dict[str, str] = field(default_factory=dict)
    """Slot id to tenant."""


class TenantLedger:
    def __init__(self, stale_after_s: float) -> None:
        self._stale_after_s = stale_after_s
        self._replicas: dict[str, _Replica] = {}

    def acquire(self, replica: str, tenant: str, limit: int, slot: str, now: float) -> bool:
        """Grant `slot` to `tenant` unless the tenant has `limit` requests in flight across the live replicas."""
        self._replicas = {r: held for r, held in self._replicas.items() if now - held.synced_at <= self._stale_after_s}
        held = self._replicas.setdefault(replica, _Replica(now))
        if slot in held.slots:
            return True
        if sum(tenant == t for live in self._replicas.values() for t in live.slots.values()) >= limit:
            return False
        held.slots[slot] = tenant
        return True

    def release(self, replica: str, slot: str) -> None:
        held = self._replicas.get(replica)
        if held is not None:
            held.slots.pop(slot, None)

    def sync(self, replica: str, slots: set[str], now: float) -> None:
        """`replica` holds (or has asked for) exactly `slots`: forget any other slot of it, and mark it live."""
        held = self._replicas.setdefault(replica, _Replica(now))
        held.synced_at = now
        held.slots = {s: t for s, t in held.slots.items() if s in slots}
