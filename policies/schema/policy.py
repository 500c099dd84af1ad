"""The whole policy file, and the rules that tie its parts together (routes name tiers, tenants' keys)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from thinktier.policies.schema.base import DEPLOY_TIME, DifficultyClass, StrictModel
from thinktier.policies.schema.lending import Lending
from thinktier.policies.schema.routing import Degradation, Routing
from thinktier.policies.schema.server import ANONYMOUS, Server, Tenant
from thinktier.policies.schema.shared_capacity import SharedCapacity, replica_devices
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
    lending: list[Lending] = Field(
        default_factory=list,
        description="Tiers that lend idle capacity to another tier's requests (a borrowed request keeps its budget and "
        "runs at the lender's lowest priority); budgets are cut (degradation) only when no tier can lend. For tiers on "
        "different devices: where the lender shares the borrower's GPU (pool.gpu_fraction), a borrowed request adds a "
        "second engine competing for it (on one H100 it slowed the borrower's own requests by a third: "
        "loadtest/results/gpu-matrix).",
    )

    shared_capacity: list[SharedCapacity] = Field(
        default_factory=list,
        description="Pools of devices that several tiers share: each tier scales on its own signal, and where together "
        "they want more than the pool's total, the total is split by how much each wants (a tier above its share gives "
        "replicas back after its autoscaling.downscale_delay_s). One Ray Serve application-level autoscaling policy "
        "decides for all tiers then. On Kubernetes, only tiers of one GPU type can share (policies/README.md).",
        json_schema_extra=DEPLOY_TIME,
    )

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
        problems += self._tenant_problems() + self._deadline_problems()
        problems += [problem for i, rule in enumerate(self.lending) for problem in self._lending_problems(i, rule)]
        problems += [problem for i, pool in enumerate(self.shared_capacity) for problem in self._shared_problems(i, pool)]
        pairs = [(rule.lender, rule.borrower) for rule in self.lending]
        if len(set(pairs)) != len(pairs):
            problems.append(f"lending: each lender and borrower pair once; got {pairs}")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _lending_problems(self, index: int, rule: Lending) -> list[str]:
        """Why tier `rule.lender` cannot serve `rule.borrower`'s requests as they are, if it cannot."""
        at = f"lending.{index}"
        missing = [f"{at}.{field}: tier {name!r} does not exist; tiers are {sorted(self.tiers)}"
                   for field, name in (("lender", rule.lender), ("borrower", rule.borrower)) if name not in self.tiers]
        if missing:
            return missing
        if rule.lender == rule.borrower:
            return [f"{at}: a tier lends to another tier; lender and borrower are both {rule.lender!r}"]
        lender, borrower = self.tiers[rule.lender], self.tiers[rule.borrower]
        problems = []
        thinks = any(budget.thinking_tokens > 0 for budget in borrower.budgets.values())
        if thinks and not lender.thinking and not (lender.empty_thinking and lender.model == borrower.model):
            problems.append(
                f"{at}: tier {rule.lender!r} cannot think ({lender.model} with thinking: false), so it cannot run "
                f"{rule.borrower!r}'s requests with their thinking budgets; lending goes one way here (lender: "
                f"{rule.borrower}, borrower: {rule.lender}), or serve the borrower's model on {rule.lender!r} with "
                "empty_thinking: true"
            )
        need = max(borrower.request_tokens(budget) for budget in borrower.budgets.values())
        if lender.engine.max_model_len < need:
            problems.append(
                f"{at}: tier {rule.lender!r} has engine.max_model_len {lender.engine.max_model_len}; {rule.borrower!r}'s "
                f"largest request needs {need} (its max_prompt_tokens + thinking + answer + 1): raise the lender's "
                "max_model_len or lower the borrower's budgets"
            )
        if lender.engine.scheduling_policy != "priority":
            problems.append(
                f"{at}: tier {rule.lender!r} schedules FCFS, so borrowed requests would hold its capacity ahead of its "
                "own; set its engine.scheduling_policy: priority (borrowed requests run at its lowest priority)"
            )
        return problems

    def _shared_problems(self, index: int, pool: SharedCapacity) -> list[str]:
        """Why the tiers of `pool` cannot share it as stated, if they cannot."""
        at = f"shared_capacity.{index}"
        problems = [f"{at}.tiers: tier {name!r} does not exist; tiers are {sorted(self.tiers)}"
                    for name in pool.tiers if name not in self.tiers]
        if problems:
            return problems
        if len(set(pool.tiers)) != len(pool.tiers):
            return [f"{at}.tiers: each tier once; got {pool.tiers}"]
        elsewhere = [name for other in self.shared_capacity[:index] for name in other.tiers if name in pool.tiers]
        if elsewhere:
            return [f"{at}.tiers: {elsewhere} already share an earlier pool; a tier shares one pool"]
        tiers = {name: self.tiers[name] for name in pool.tiers}
        kinds = {name: (t.pool.accelerator, t.pool.accelerator_type) for name, t in tiers.items()}
        if len(set(kinds.values())) > 1:
            stated = ", ".join(f"{name}: {kind}{f' {model}' if model else ''}" for name, (kind, model) in kinds.items())
            return [f"{at}.tiers: tiers of one pool run on one kind of device (pool.accelerator and "
                    f"pool.accelerator_type); got {stated}. A device cannot move between types: share within each type"]
        fixed = [name for name, t in tiers.items() if t.replicas.min == t.replicas.max]
        if fixed:
            problems.append(f"{at}.tiers: {fixed} have a fixed replica count (replicas.min == max), so nothing can move "
                            "between them and the pool; give each a range or leave it out")
        unit = "CPUs" if kinds[pool.tiers[0]][0] == "cpu" else "GPUs"
        least = sum(t.replicas.min * replica_devices(t) for t in tiers.values())
        most = sum(t.replicas.max * replica_devices(t) for t in tiers.values())
        biggest = max(tiers, key=lambda name: replica_devices(tiers[name]))
        if pool.total < least:
            problems.append(f"{at}.total: {pool.total:g} {unit} is below the tiers' replicas.min together ({least:g}); "
                            f"raise total to at least {least:g} or lower their min")
        elif pool.total < replica_devices(tiers[biggest]):
            problems.append(f"{at}.total: {pool.total:g} {unit} cannot hold one replica of {biggest!r} "
                            f"({replica_devices(tiers[biggest]):g}); raise total")
        if pool.total >= most:
            problems.append(f"{at}.total: {pool.total:g} {unit} holds the tiers' replicas.max together ({most:g}), so the "
                            f"pool never limits them; lower total below {most:g} or raise their max")
        return problems

    def _deadline_problems(self) -> list[str]:
        """Objectives the service's own deadlines make unreachable: a request is cut at server.tier_timeout_s."""
        cap = self.server.tier_timeout_s
        return [
            f"slos.{name}.e2e_s: {slo.e2e_s:g} s exceeds server.tier_timeout_s ({cap:g} s), which ends such a request "
            f"first; raise tier_timeout_s to at least {slo.e2e_s:g} or lower the objective"
            for name, slo in self.slos.items()
            if slo.e2e_s > cap
        ]

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
