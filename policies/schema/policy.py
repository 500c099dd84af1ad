"""The whole policy file, and the rules that tie its parts together (routes name tiers, tenants' keys)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from thinktier.policies.schema.base import DifficultyClass, StrictModel
from thinktier.policies.schema.routing import Degradation, Routing
from thinktier.policies.schema.server import ANONYMOUS, Server, Tenant
from thinktier.policies.schema.slos import SLO, default_slos
from thinktier.policies.schema.tier import Tier


class Policy(StrictModel):
    """The whole policy file."""

    version: Literal[1] = Field(1, description="Policy schema version.")
    server: Server = Field(default_factory=Server)
    tiers: dict[str, Tier] = Field(description="Tiers by name; each becomes a Ray Serve deployment.")
    routing: Routing = Field(default_factory=Routing)
    degradation: Degradation = Field(default_factory=Degradation)
    slos: dict[DifficultyClass, SLO] = Field(default_factory=default_slos)
    tenants: dict[str, Tenant] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _routes_exist(self) -> Policy:
        names = sorted(self.tiers)
        problems = []
        routes = (("routing.reasoning_tier", self.routing.reasoning_tier), ("routing.chat_tier", self.routing.chat_tier))
        for field, tier in routes:
            if tier is not None and tier not in self.tiers:
                problems.append(f"{field}: tier {tier!r} does not exist; tiers are {names}")
        chat = self.routing.chat_tier
        if chat in self.tiers and self.tiers[chat].thinking:
            problems.append(f"routing.chat_tier: tier {chat!r} must have thinking: false")
        served = [t.served_model_name or n for n, t in self.tiers.items()]
        if len(set(served)) != len(served):
            problems.append(f"tiers: served model names must be unique; got {served}")
        problems += self._tenant_problems()
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _tenant_problems(self) -> list[str]:
        problems = [
            f"tenants.{name}.api_key_env: required (the environment variable that holds the tenant's API key)"
            for name, tenant in self.tenants.items() if name != ANONYMOUS and tenant.api_key_env is None
        ]
        anonymous = self.tenants.get(ANONYMOUS)
        if anonymous is not None and anonymous.api_key_env is not None:
            problems.append(f"tenants.{ANONYMOUS}.api_key_env: the anonymous tenant is the one without a key; remove it")
        if anonymous is not None and not self.anonymous_allowed:
            problems.append(
                f"tenants.{ANONYMOUS}: sets limits of requests without a key, which this policy refuses; "
                "set server.allow_anonymous: true or remove the entry"
            )
        return problems

    @property
    def keyed_tenants(self) -> dict[str, Tenant]:
        """The tenants known by an API key (all but `anonymous`)."""
        return {name: tenant for name, tenant in self.tenants.items() if tenant.api_key_env is not None}

    @property
    def anonymous_allowed(self) -> bool:
        """Requests without a key are served: as the policy says, or when it does not say, while no tenant has a key."""
        allowed = self.server.allow_anonymous
        return not self.keyed_tenants if allowed is None else allowed

    def served_name(self, tier: str) -> str:
        return self.tiers[tier].served_model_name or tier

    def tier_for_model(self, model: str) -> str | None:
        for name in self.tiers:
            if model in (name, self.served_name(name)):
                return name
        return None
