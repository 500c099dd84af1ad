"""Admission, before any model work: who is calling (a tenant, or 401) and whether they may start one
more request now (a slot, or 429)."""

from __future__ import annotations

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
        """The tenant an `Authorization: Bearer <key>` header names; 401 for an unknown key, or no key where
        anonymous requests are not allowed."""
        key = authorization.removeprefix("Bearer ").strip() if authorization.startswith("Bearer ") else ""
        for name, tenant in policy.tenants.items():
            expected = os.environ.get(tenant.api_key_env)
            if expected and key == expected:
                return name
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
