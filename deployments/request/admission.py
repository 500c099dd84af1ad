"""Admission, before any model work: who is calling (a tenant, or 401) and whether they may start one
more request now (a slot, or 429)."""

from __future__ import annotations

import hmac
import os
from types import TracebackType

from thinktier.deployments.request.openai_api import APIError
from thinktier.policies.schema import ANONYMOUS, Policy


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
    """Tenants by API key and their requests in flight, under the live policy."""

    def __init__(self) -> None:
        self._in_flight: dict[str, int] = {}

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

    def slot(self, policy: Policy, tenant: str) -> Slot:
        """A slot for one more request of `tenant`, or 429 when the tenant has its limit in flight."""
        limit = policy.tenants[tenant].max_concurrent_requests if tenant in policy.tenants else None
        if limit is not None and self._in_flight.get(tenant, 0) >= limit:
            raise APIError(429, f"tenant {tenant!r} has {limit} requests in flight, its limit; retry later",
                           "rate_limit_error", code="tenant_concurrency", headers={"Retry-After": "1"})
        return Slot(self._in_flight, tenant)
