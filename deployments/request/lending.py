"""Borrowing: a request whose tier is busy runs on a tier that lends idle capacity (policy `lending`), before any
budget is cut.

A pure function of the policy, the decision and the tiers' last reported load, like the rest of routing. The share a
lender gives is counted from its replicas' reports (`num_borrowed`), so it lags by one stats interval: a burst can
overshoot it by what the Ingress replicas route within that interval.
"""

from __future__ import annotations

from dataclasses import replace

from thinktier.deployments.request.decision import Decision
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.schema import Lending, Policy

BORROWED_DEADLINE_OFFSET_MS = 10**12
"""Under the deadline order, a borrowed request's priority is its deadline plus this (about 32 years), so it sorts
after every request of the lender's own and, among borrowed ones, by deadline."""


def borrowed_offset(policy: Policy) -> int:
    """Added to a request's own vLLM priority when it runs on lent capacity: it then sorts after every request of the
    lender's own (a larger value is scheduled later and preempted first), keeping its order among borrowed ones."""
    if policy.routing.priority_order == "deadline":
        return BORROWED_DEADLINE_OFFSET_MS
    values = policy.routing.priority.values()
    return max(values) - min(values) + 1


def _ongoing(replica: ReplicaStats) -> int:
    return replica.num_running + replica.num_waiting


def busy(replicas: tuple[ReplicaStats, ...], rule: Lending) -> bool:
    """Whether no replica of the borrower's tier could start a request now (KV nearly full or a queue), or, where the
    rule counts requests, every replica holds its limit of them."""
    crowded = rule.borrow_above_ongoing_requests
    return bool(replicas) and all(
        r.kv_occupancy >= rule.borrow_above_kv_occupancy or r.num_waiting > 0
        or (crowded is not None and _ongoing(r) >= crowded)
        for r in replicas
    )


def has_room(policy: Policy, replicas: tuple[ReplicaStats, ...], rule: Lending) -> bool:
    """Whether the lender has a replica with room and borrowed requests hold less than their share of its slots."""
    slots = policy.tiers[rule.lender].engine.max_num_seqs * len(replicas)
    limit = rule.lend_below_ongoing_requests
    idle = any(
        r.kv_occupancy < rule.lend_below_kv_occupancy and r.num_waiting == 0 and (limit is None or _ongoing(r) < limit)
        for r in replicas
    )
    return idle and sum(r.num_borrowed for r in replicas) < rule.max_share * slots


def borrow(policy: Policy, decision: Decision, loads: dict[str, tuple[ReplicaStats, ...]]) -> Decision | None:
    """`decision` moved to the first tier that lends to its tier and has room, when its own tier is busy; None when
    its tier has room, or no lender has."""
    home = loads.get(decision.tier, ())
    for rule in policy.lending:
        if rule.borrower == decision.tier and busy(home, rule) and has_room(policy, loads.get(rule.lender, ()), rule):
            return replace(decision, tier=rule.lender, home=decision.tier,
                           priority=decision.priority + borrowed_offset(policy))
    return None


def returned(policy: Policy, decision: Decision) -> Decision:
    """A borrowed request given back to its own tier (its lender is down or failed it): its own priority again."""
    if decision.home is None:
        return decision
    return replace(decision, tier=decision.home, home=None, priority=decision.priority - borrowed_offset(policy))
