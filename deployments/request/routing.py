"""The routing decision as a pure function of the policy, the request, the difficulty and the tiers' load.

Steps, each small and testable alone: pick the tier and effort (request model name, classifier
score, requested effort, policy default), clip the budgets to the policy and tenant, map the
difficulty to a vLLM priority, borrow another tier's idle capacity when the chosen tier is busy
(lending.py), then degrade when the chosen tier is saturated and no tier could lend.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from thinktier.deployments.request.decision import Decision, DifficultyScore, RoutingRequest
from thinktier.deployments.request.lending import borrow
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.schema import EFFORTS, DifficultyClass, Effort, Policy

EFFORT_CLASS: dict[Effort, DifficultyClass] = {"low": "easy", "medium": "medium", "high": "hard"}


class Overloaded(Exception):
    """No tier can take the request now; the client should retry after `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class TierLoad:
    """The latest stats of every live replica of a tier."""

    replicas: tuple[ReplicaStats, ...] = ()

    def saturated(self, kv_threshold: float, waiting_threshold: int) -> bool:
        """Saturated when every replica is (a request cannot go anywhere better)."""
        return bool(self.replicas) and all(
            r.kv_occupancy >= kv_threshold or r.num_waiting >= waiting_threshold for r in self.replicas
        )


def _effort_at_most(effort: Effort, cap: Effort) -> Effort:
    return effort if EFFORTS.index(effort) <= EFFORTS.index(cap) else cap


def effort_for_score(policy: Policy, score: float) -> Effort:
    thresholds = policy.routing.thresholds
    if score >= thresholds.high:
        return "high"
    if score >= thresholds.medium:
        return "medium"
    return "low"


def choose_tier(policy: Policy, request: RoutingRequest, difficulty: DifficultyScore | None) -> tuple[str, Effort, str]:
    """Tier, effort and the reason, before budgets and load."""
    routing = policy.routing
    named = policy.tier_for_model(request.model) if request.model else None
    if named is not None:
        return named, request.reasoning_effort or routing.default_effort, "model"
    if request.thinking_off:  # the answer budget of the default effort, no thinking (budget_decision)
        return routing.chat_tier or routing.reasoning_tier, routing.default_effort, "request_no_thinking"
    if request.reasoning_effort is not None:
        return routing.reasoning_tier, request.reasoning_effort, "request_effort"
    if difficulty is not None:
        if difficulty.score < routing.thresholds.reasoning and routing.chat_tier is not None:
            return routing.chat_tier, "low", "classifier"
        return routing.reasoning_tier, effort_for_score(policy, difficulty.score), "classifier"
    return routing.reasoning_tier, routing.default_effort, "default"


def budget_decision(
    policy: Policy, request: RoutingRequest, tier: str, effort: Effort, reason: str, difficulty: DifficultyScore | None
) -> Decision:
    """Budgets of the tier's effort level, clipped by the request's own caps (never raised by them)."""
    tenant = policy.tenants.get(request.tenant)
    if tenant is not None:
        effort = _effort_at_most(effort, tenant.max_effort)
    budget = policy.tiers[tier].budgets[effort]
    thinking = 0 if request.thinking_off or _needs_no_reasoning(policy, reason, difficulty) else budget.thinking_tokens
    if request.max_thinking_tokens is not None:
        thinking = min(thinking, request.max_thinking_tokens)
    answer = budget.answer_tokens
    if request.max_answer_tokens is not None:
        answer = min(answer, request.max_answer_tokens)
    samples = budget.samples if request.samples is None else min(budget.samples, request.samples)
    consensus = budget.consensus_of(samples) if request.early_stop else samples
    staged = budget.staged and consensus < samples
    certainty_agree = None
    if budget.early_exit and request.early_stop and thinking > 0 and samples == 1:
        certainty_agree = max(policy.tiers[tier].early_exit.agree, request.early_stop_agree or 0)
    klass = difficulty.label if difficulty is not None else EFFORT_CLASS[effort]
    if tier == policy.routing.chat_tier:
        klass = "easy" if difficulty is None else klass
    # The priority follows the budget, as the effort band sets it, not the classifier's most likely class: a request
    # given a long budget is a long request (the two can disagree near a band's edge).
    scheduled_as = "easy" if tier == policy.routing.chat_tier else EFFORT_CLASS[effort]
    return Decision(
        tier=tier,
        effort=effort,
        difficulty=klass,
        thinking_tokens=thinking,
        answer_tokens=answer,
        samples=samples,
        consensus=consensus,
        staged=staged,
        certainty_agree=certainty_agree,
        priority=vllm_priority(policy, scheduled_as, request.arrival_s),
        reason=reason,
        score=difficulty.score if difficulty is not None else None,
    )


def _needs_no_reasoning(policy: Policy, reason: str, difficulty: DifficultyScore | None) -> bool:
    """Whether the classifier scored the prompt below `thresholds.reasoning`: answered with thinking off, on the chat
    tier where there is one and on the reasoning tier (its low budget's answer) where there is none."""
    return reason == "classifier" and difficulty is not None and difficulty.score < policy.routing.thresholds.reasoning


def vllm_priority(policy: Policy, scheduled_as: DifficultyClass, arrival_s: float) -> int:
    """vLLM's priority (lower is scheduled first and preempted last) of a request scheduled as class `scheduled_as`:
    the class's fixed value, or its deadline in milliseconds (routing.priority_order)."""
    if policy.routing.priority_order == "deadline":
        return round(1000 * (arrival_s + policy.slos[scheduled_as].ttfvt_s))
    return policy.routing.priority[scheduled_as]


def degrade(policy: Policy, request: RoutingRequest, decision: Decision, loads: dict[str, TierLoad]) -> Decision:
    """Serve a request the saturated tier cannot take: a smaller budget, then the chat tier, then 429."""
    rules = policy.degradation

    def saturated(tier: str) -> bool:
        load = loads.get(tier, TierLoad())
        return load.saturated(rules.saturated_kv_occupancy, rules.saturated_waiting_requests)

    if not saturated(decision.tier):
        return decision
    chat = policy.routing.chat_tier
    shrink = rules.shrink_budget_to
    if decision.tier != chat and shrink is not None and EFFORTS.index(decision.effort) > EFFORTS.index(shrink):
        smaller = budget_decision(policy, request, decision.tier, shrink, decision.reason, None)
        return replace(
            decision,
            effort=shrink,
            thinking_tokens=smaller.thinking_tokens,
            answer_tokens=smaller.answer_tokens,
            samples=smaller.samples,
            consensus=smaller.consensus,
            staged=smaller.staged,
            certainty_agree=smaller.certainty_agree,
            priority=smaller.priority,
            degraded=f"budget:{shrink}",
        )
    if decision.tier != chat and rules.fallback_to_chat and chat is not None and not saturated(chat):
        return to_chat(policy, request, decision, chat, "chat")
    raise Overloaded(f"tier {decision.tier!r} is saturated and no other tier can take the request", rules.retry_after_s)


def to_chat(policy: Policy, request: RoutingRequest, decision: Decision, chat: str, degraded: str) -> Decision:
    """`decision` served by the chat tier (thinking off), with its difficulty, marked `degraded`. Its priority is the
    chat tier's, as for any request there: the priority follows the budget the request now has, not the one it lost."""
    fallback = budget_decision(policy, request, chat, decision.effort, decision.reason, None)
    return replace(fallback, difficulty=decision.difficulty, score=decision.score, degraded=degraded)


def failover(policy: Policy, request: RoutingRequest, decision: Decision, why: str, chat_live: bool) -> Decision | None:
    """The chat tier's decision for a request whose tier failed or is down (`why`), where the policy allows it
    (degradation.fallback_on_failure) and the chat tier is live; None otherwise."""
    chat = policy.routing.chat_tier
    if chat is None or decision.tier == chat or not chat_live or not policy.degradation.fallback_on_failure:
        return None
    return to_chat(policy, request, decision, chat, f"chat:{why}")


def decide(
    policy: Policy, request: RoutingRequest, difficulty: DifficultyScore | None, loads: dict[str, TierLoad]
) -> Decision:
    tier, effort, reason = choose_tier(policy, request, difficulty)
    decision = budget_decision(policy, request, tier, effort, reason, difficulty)
    borrowed = borrow(policy, decision, {name: load.replicas for name, load in loads.items()})
    return borrowed or degrade(policy, request, decision, loads)
