"""Admission, before any model work: who is calling (a tenant, or 401) and whether they may start one
more request now (a slot, or 429)."""

from __future__ import annotations

import hmac
import os
from types import TracebackType

from deployments.openai_api import APIError
from policies.schema import Policy

ANONYMOUS = "anonymous"


class Slot:
    """One request in flight for a tenant; an async context manager that gives the slot back on every exit,
    and `release()` for the paths that end outside one (it gives back at most once)."""

    def __init__(self, counts: dict[str, int], tenant: str) -> None:
        self._counts = counts
        self.tenant = tenant
        self._held = True
        counts[tenant] = counts.get(tenant, 0) + 1

    def release(self) -> None:
        if self._held:
            self._held = False
            self._counts[self.tenant] -= 1

    async def __aenter__(self) -> Slot:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()


class Admission:
    """Tenants by API key and their requests in flight, under the live policy."""

    def __init__(self) -> None:
        self._in_flight: dict[str, int] = {}

    def tenant(self, policy: Policy, authorization: str) -> str:
        """The tenant an `Authorization: Bearer <key>` header names (the scheme in any case); 401 for an unknown key,
        another scheme, or no key where anonymous requests are not allowed. Every tenant's key is compared, in
        constant time, so the time taken tells nothing about which key came close."""
        scheme, _, key = authorization.strip().partition(" ")
        if scheme and scheme.lower() != "bearer":
            raise APIError(401, f"unsupported authorization scheme {scheme[:20]!r}: send 'Authorization: Bearer <key>'",
                           "authentication_error", code="invalid_api_key")
        key = key.strip()
        found = None
        for name, tenant in policy.tenants.items():
            expected = os.environ.get(tenant.api_key_env, "")
            if hmac.compare_digest(key.encode(), expected.encode()) and expected:
                found = name
        if found is not None:
            return found
        if key and policy.tenants:
            raise APIError(401, "unknown API key: it belongs to no tenant of this service's policy", "authentication_error",
                           code="invalid_api_key")
        if policy.server.allow_anonymous:
            return ANONYMOUS
        raise APIError(401, "missing API key: send 'Authorization: Bearer <key>'", "authentication_error",
                       code="invalid_api_key")

    def slot(self, policy: Policy, tenant: str) -> Slot:
        """A slot for one more request of `tenant`, or 429 when the tenant has its limit in flight."""
        limit = policy.tenants[tenant].max_concurrent_requests if tenant in policy.tenants else None
        if limit is not None and self._in_flight.get(tenant, 0) >= limit:
            raise APIError(429, f"tenant {tenant!r} has {limit} requests in flight, its limit; retry later",
                           "rate_limit_error", code="tenant_concurrency", headers={"Retry-After": "1"})
        return Slot(self._in_flight, tenant)
