"""Admission, before any model work: who is calling (a tenant, or 401) and whether they may start one
more request now (a slot, or 429)."""

from __future__ import annotations

import hmac
import math
import os
import uuid
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

from thinktier.deployments.request.openai_api import APIError
from thinktier.policies.schema import ANONYMOUS, Policy


class SharedSlots(Protocol):
    """The service-wide count of each tenant's requests in flight (the load board's TenantLedger)."""

    async def acquire(self, tenant: str, limit: int, slot: str) -> bool: ...

    def release(self, slot: str) -> None: ...


class Slot:
    """One request in flight for a tenant; an async context manager that gives the slot back on every exit,
    and `release()` for the paths that end outside one (it gives back at most once)."""

    def __init__(self, admission: Admission, tenant: str, slot_id: str) -> None:
        self._admission = admission
        self.tenant = tenant
        self.id = slot_id
        self._held = True

    def release(self) -> None:
        if self._held:
            self._held = False
            self._admission.give_back(self)

    async def __aenter__(self) -> Slot:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


def bearer_key(authorization: str) -> str:
    """The key of an `Authorization: Bearer <key>` header (the scheme in any case, spaces trimmed); "" for none; 401
    for another scheme."""
    scheme, _, key = authorization.strip().partition(" ")
    if scheme and scheme.lower() != "bearer":
        raise APIError(401, f"unsupported authorization scheme {scheme[:20]!r}: send 'Authorization: Bearer <key>'",
                       "authentication_error", code="invalid_api_key")
    return key.strip()


def matches(key: str, env: str | None) -> bool:
    """Whether `key` is the (non-empty) key held in environment variable `env`, compared in constant time."""
    expected = os.environ.get(env, "") if env else ""
    return hmac.compare_digest(key.encode(), expected.encode()) and bool(expected)


class Admission:
    """Tenants by API key and their requests in flight, under the live policy. A tenant's `max_concurrent_requests`
    is counted across every Ingress replica through `shared`; when that count cannot be reached, each replica holds
    the tenant to its share of the limit (the limit over the Ingress replicas it knows of, rounded up) and
    `on_shared_failure` is told."""

    def __init__(self, shared: SharedSlots | None = None, on_shared_failure: Callable[[Exception], None] | None = None) -> None:
        self._shared = shared
        self._on_shared_failure = on_shared_failure
        self._in_flight: dict[str, int] = {}
        self._asked: dict[str, str] = {}
        """Slot id to tenant: every slot of a limited tenant this replica holds or has asked for."""

    def tenant(self, policy: Policy, authorization: str) -> str:
        """The tenant an `Authorization: Bearer <key>` header names (the scheme in any case); 401 for an unknown key,
        another scheme, or no key where the policy does not allow anonymous requests (`Policy.anonymous_allowed`).
        Every tenant's key is compared, in constant time, so the time taken tells nothing about which key came close."""
        key = bearer_key(authorization)
        found = None
        for name, tenant in policy.keyed_tenants.items():
            if matches(key, tenant.api_key_env):
                found = name
        if found is not None:
            return found
        if key and policy.keyed_tenants:
            raise APIError(401, "unknown API key: it belongs to no tenant of this service's policy", "authentication_error",
                           code="invalid_api_key")
        if policy.anonymous_allowed:
            return ANONYMOUS
        raise APIError(401, "missing API key: send 'Authorization: Bearer <key>'", "authentication_error",
                       code="invalid_api_key")

    def in_flight(self, policy: Policy) -> dict[str, int]:
        """Requests in flight by tenant, for every tenant of the policy (and `anonymous` where it is served): a label
        set bounded by the policy, not by what clients send."""
        names = [*policy.tenants, *([ANONYMOUS] if policy.anonymous_allowed else [])]
        return {name: self._in_flight.get(name, 0) for name in dict.fromkeys(names)}

    def held_slots(self) -> set[str]:
        """The shared slots this replica holds or has asked for: what it syncs with the shared count."""
        return set(self._asked)

    async def slot(self, policy: Policy, tenant: str, replicas: int = 1) -> Slot:
        """A slot for one more request of `tenant`, or 429 when the tenant has its limit in flight across the service
        (`replicas`: the Ingress replicas this one knows of, itself included, for the fallback share)."""
        limit = policy.tenants[tenant].max_concurrent_requests if tenant in policy.tenants else None
        slot_id = uuid.uuid4().hex
        if limit is not None and not await self._granted(tenant, limit, slot_id, replicas):
            raise APIError(429, f"tenant {tenant!r} has {limit} requests in flight, its limit; retry later",
                           "rate_limit_error", code="tenant_concurrency", headers={"Retry-After": "1"})
        self._in_flight[tenant] = self._in_flight.get(tenant, 0) + 1
        return Slot(self, tenant, slot_id)

    async def _granted(self, tenant: str, limit: int, slot_id: str, replicas: int) -> bool:
        self._asked[slot_id] = tenant  # before asking: a sync never drops a grant that is on its way back
        granted = False
        try:
            granted = await self._ask(tenant, limit, slot_id, replicas)
        finally:
            if not granted:  # refused or cancelled: a grant made meanwhile is dropped at the next sync
                self._asked.pop(slot_id, None)
        return granted

    async def _ask(self, tenant: str, limit: int, slot_id: str, replicas: int) -> bool:
        """The shared count's answer; this replica's own count (its share of the limit, where the shared count is out
        of reach) otherwise."""
        share = limit
        if self._shared is not None:
            try:
                return await self._shared.acquire(tenant, limit, slot_id)
            except Exception as exc:  # the shared count is out of reach
                if self._on_shared_failure is not None:
                    self._on_shared_failure(exc)
                share = math.ceil(limit / max(1, replicas))
        return self._in_flight.get(tenant, 0) < share

    def give_back(self, slot: Slot) -> None:
        self._in_flight[slot.tenant] -= 1
        if self._asked.pop(slot.id, None) is not None and self._shared is not None:
            self._shared.release(slot.id)
