"""The router's decision: thresholds, clipping, priorities, borrowing and degradation, exactly as the policy says."""

from __future__ import annotations

from pathlib import Path

import pytest

from thinktier.deployments.request.decision import DifficultyScore, RoutingRequest
from thinktier.deployments.request.lending import returned
from thinktier.deployments.request.routing import Overloaded, TierLoad, decide
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.loader import load_policy, with_setting

POLICY = load_policy()  # the embedded default: thresholds 0.3 / 0.6 / 0.8
BUDGETS = POLICY.tiers["reasoning"].budgets
FULL = TierLoad((ReplicaStats(kv_occupancy=0.99),))
IDLE = TierLoad((ReplicaStats(kv_occupancy=0.1),))


def score(value: float) -> DifficultyScore:
    label = "hard" if value >= 0.8 else "medium" if value >= 0.6 else "easy"
    return DifficultyScore(value, {"easy": 0.0, "medium": 0.0, "hard": 0.0} | {label: 1.0}, "test")


@pytest.mark.parametrize(
    ("value", "tier", "effort"),
    [(0.0, "chat", "low"), (0.29, "chat", "low"), (0.3, "reasoning", "low"), (0.599, "reasoning", "low"),
     (0.6, "reasoning", "medium"), (0.8, "reasoning", "high"), (1.0, "reasoning", "high")],
)
def test_thresholds_map_score_to_tier_and_effort(value: float, tier: str, effort: str) -> None:
    decision = decide(POLICY, RoutingRequest(prompt="p"), score(value), {})
    assert (decision.tier, decision.effort, decision.reason) == (tier, effort, "classifier")
    assert decision.thinking_tokens == POLICY.tiers[tier].budgets[effort].thinking_tokens


def test_request_caps_clip_the_budget_but_never_raise_it() -> None:
    request = RoutingRequest(prompt="p", reasoning_effort="high", max_thinking_tokens=10, max_answer_tokens=5)
    lower = decide(POLICY, request, None, {})
    assert (lower.thinking_tokens, lower.answer_tokens) == (10, 5)
    higher = decide(POLICY, RoutingRequest(prompt="p", reasoning_effort="low", max_thinking_tokens=10**6), None, {})
    assert higher.thinking_tokens == BUDGETS["low"].thinking_tokens
    assert higher.reason == "request_effort"


def test_model_name_picks_the_tier_and_default_effort_applies() -> None:
    decision = decide(POLICY, RoutingRequest(prompt="p", model="thinktier-chat"), score(0.99), {})
    assert (decision.tier, decision.reason, decision.thinking_tokens) == ("chat", "model", 0)
    default = decide(POLICY, RoutingRequest(prompt="p"), None, {})
    assert (default.tier, default.effort, default.reason) == ("reasoning", "medium", "default")


def test_hard_requests_get_the_lower_vllm_priority() -> None:
    easy = decide(POLICY, RoutingRequest(prompt="p"), score(0.35), {})
    hard = decide(POLICY, RoutingRequest(prompt="p"), score(0.95), {})
    assert hard.priority > easy.priority  # vLLM schedules lower values first and preempts higher ones first
    assert (easy.difficulty, hard.difficulty) == ("easy", "hard")


def test_saturated_reasoning_tier_shrinks_budget_then_falls_back_to_chat_then_sheds() -> None:
    request = RoutingRequest(prompt="p", reasoning_effort="high")
    shrunk = decide(POLICY, request, None, {"reasoning": FULL, "chat": IDLE})
    assert (shrunk.tier, shrunk.effort, shrunk.degraded) == ("reasoning", "low", "budget:low")
    assert shrunk.thinking_tokens == BUDGETS["low"].thinking_tokens
    low = RoutingRequest(prompt="p", reasoning_effort="low")
    fallback = decide(POLICY, low, None, {"reasoning": FULL, "chat": IDLE})
    assert (fallback.tier, fallback.thinking_tokens, fallback.degraded) == ("chat", 0, "chat")
    assert fallback.headers()["x-thinktier-degraded"] == "chat"
    with pytest.raises(Overloaded) as shed:
        decide(POLICY, low, None, {"reasoning": FULL, "chat": FULL})
    assert shed.value.retry_after_s == POLICY.degradation.retry_after_s


def test_a_degraded_request_is_scheduled_as_the_budget_it_got_not_the_one_it_lost() -> None:
    priority = POLICY.routing.priority
    request = RoutingRequest(prompt="p", reasoning_effort="high")
    shrunk = decide(POLICY, request, None, {"reasoning": FULL, "chat": IDLE})
    assert shrunk.degraded == "budget:low" and shrunk.priority == priority["easy"] < priority["hard"]
    moved = decide(POLICY, RoutingRequest(prompt="p", reasoning_effort="low"), score(0.95), {"reasoning": FULL, "chat": IDLE})
    assert (moved.tier, moved.difficulty, moved.priority) == ("chat", "hard", priority["easy"])


def test_the_deadline_order_lets_a_long_waiting_hard_request_outrank_a_fresh_easy_one() -> None:
    deadline = POLICY.model_copy(update={"routing": POLICY.routing.model_copy(update={"priority_order": "deadline"})})
    slos = POLICY.slos
    waited = slos["hard"].ttfvt_s - slos["easy"].ttfvt_s + 1  # arrived long enough ago that its deadline comes first
    hard = decide(deadline, RoutingRequest(prompt="p", arrival_s=1000.0 - waited), score(0.95), {})
    easy = decide(deadline, RoutingRequest(prompt="p", arrival_s=1000.0), score(0.35), {})
    assert hard.priority == round(1000 * (1000.0 - waited + slos["hard"].ttfvt_s)) < easy.priority
    fresh_hard = decide(deadline, RoutingRequest(prompt="p", arrival_s=1000.0), score(0.95), {})
    assert fresh_hard.priority > easy.priority  # arrived together: the tighter objective goes first
    by_class = decide(POLICY, RoutingRequest(prompt="p", arrival_s=1000.0 - waited), score(0.95), {})
    assert by_class.priority == POLICY.routing.priority["hard"]  # the class order ignores how long it waited
    moved = decide(deadline, RoutingRequest(prompt="p", reasoning_effort="low", arrival_s=1000.0), score(0.95),
                   {"reasoning": FULL, "chat": IDLE})
    assert (moved.tier, moved.priority) == ("chat", easy.priority)  # on the chat tier it is held to the easy objective


def test_one_idle_replica_means_not_saturated() -> None:
    mixed = TierLoad((ReplicaStats(kv_occupancy=0.99), ReplicaStats(kv_occupancy=0.2)))
    decision = decide(POLICY, RoutingRequest(prompt="p", reasoning_effort="high"), None, {"reasoning": mixed})
    assert decision.degraded is None and decision.effort == "high"


def test_the_priority_follows_the_budget_when_the_classifiers_label_disagrees_with_its_score() -> None:
    # Mostly "easy" by its probabilities, but its score sits in the medium band: it gets the medium budget, so it is
    # scheduled as the longer request it is.
    leaning_easy = DifficultyScore(0.66, {"easy": 0.57, "medium": 0.04, "hard": 0.39}, "test")
    decision = decide(POLICY, RoutingRequest(prompt="p"), leaning_easy, {})
    assert (decision.effort, decision.difficulty) == ("medium", "easy")
    assert decision.priority == POLICY.routing.priority["medium"] > POLICY.routing.priority["easy"]


@pytest.mark.parametrize("effort", [None, "high"])
def test_a_request_without_thinking_goes_to_the_chat_tier_whatever_its_score(effort: str | None) -> None:
    request = RoutingRequest(prompt="p", reasoning_effort=effort, thinking_off=True)  # type: ignore[arg-type]
    decision = decide(POLICY, request, score(0.95), {})
    assert (decision.tier, decision.thinking_tokens, decision.reason) == ("chat", 0, "request_no_thinking")
    assert decision.answer_tokens == POLICY.tiers["chat"].budgets[POLICY.routing.default_effort].answer_tokens


def test_a_one_pool_policy_serves_a_request_without_thinking_from_its_one_tier_with_no_thinking_budget() -> None:
    one_pool = load_policy(Path(__file__).resolve().parents[2] / "policies" / "examples" / "single-pool.yaml")
    decision = decide(one_pool, RoutingRequest(prompt="p", thinking_off=True), None, {})
    assert (decision.tier, decision.thinking_tokens) == (one_pool.routing.reasoning_tier, 0)


def test_a_one_pool_policy_with_a_classifier_answers_a_prompt_that_needs_no_reasoning_with_thinking_off() -> None:
    one_pool = load_policy(Path(__file__).resolve().parents[2] / "policies" / "examples" / "single-pool.yaml")
    classified = one_pool.model_copy(update={"routing": one_pool.routing.model_copy(
        update={"classifier": one_pool.routing.classifier.model_copy(update={"enabled": True})})})
    no_reasoning = decide(classified, RoutingRequest(prompt="hi"), score(0.1), {})
    assert (no_reasoning.tier, no_reasoning.effort, no_reasoning.thinking_tokens) == ("reasoning", "low", 0)
    assert no_reasoning.answer_tokens == classified.tiers["reasoning"].budgets["low"].answer_tokens
    easy = decide(classified, RoutingRequest(prompt="2+2?"), score(0.3), {})
    assert easy.thinking_tokens == classified.tiers["reasoning"].budgets["low"].thinking_tokens > 0


LENDING = with_setting(with_setting(POLICY, "tiers.chat.empty_thinking", "true"), "lending",
                       '[{"lender": "chat", "borrower": "reasoning", "max_share": 0.25}]')
BUSY = TierLoad((ReplicaStats(kv_occupancy=0.92), ReplicaStats(kv_occupancy=0.3, num_waiting=2)))


def test_a_busy_tier_borrows_an_idle_tier_at_its_lowest_priority_and_keeps_its_own_budget() -> None:
    request = RoutingRequest(prompt="p", reasoning_effort="high")
    own = decide(LENDING, request, None, {})
    borrowed = decide(LENDING, request, None, {"reasoning": BUSY, "chat": IDLE})
    assert (borrowed.tier, borrowed.home, borrowed.degraded) == ("chat", "reasoning", None)
    assert (borrowed.thinking_tokens, borrowed.answer_tokens) == (own.thinking_tokens, own.answer_tokens)
    assert borrowed.priority > max(LENDING.routing.priority.values())  # after every request of the chat tier's own
    assert borrowed.headers()["x-thinktier-borrowed"] == "reasoning"
    assert returned(LENDING, borrowed) == own  # given back when the lender is down: its own tier and priority again
    easy = decide(LENDING, RoutingRequest(prompt="p", reasoning_effort="low"), None, {"reasoning": BUSY, "chat": IDLE})
    assert easy.priority < borrowed.priority  # borrowed requests keep their own order among themselves


def test_no_borrowing_while_the_own_tier_has_room_or_the_lender_has_none() -> None:
    request = RoutingRequest(prompt="p", reasoning_effort="high")
    roomy = TierLoad((ReplicaStats(kv_occupancy=0.92), ReplicaStats(kv_occupancy=0.5)))
    assert decide(LENDING, request, None, {"reasoning": roomy, "chat": IDLE}).home is None
    lender_busy = TierLoad((ReplicaStats(kv_occupancy=0.6),))  # above lend_below_kv_occupancy (0.5)
    assert decide(LENDING, request, None, {"reasoning": BUSY, "chat": lender_busy}).home is None
    slots = LENDING.tiers["chat"].engine.max_num_seqs
    lent_out = TierLoad((ReplicaStats(kv_occupancy=0.1, num_borrowed=slots // 4),))  # its 25 % share taken
    assert decide(LENDING, request, None, {"reasoning": BUSY, "chat": lent_out}).home is None
    assert decide(LENDING, request, None, {"chat": IDLE}).home is None  # no report from the own tier: nothing known
    whole = with_setting(LENDING, "lending.0.max_share", "1")  # a list item set by its index, as --set and --sweep do
    assert decide(whole, request, None, {"reasoning": BUSY, "chat": lent_out}).home == "reasoning"


def test_budgets_are_cut_only_when_no_tier_can_lend() -> None:
    request = RoutingRequest(prompt="p", reasoning_effort="high")
    lent = decide(LENDING, request, None, {"reasoning": FULL, "chat": IDLE})
    assert (lent.tier, lent.effort, lent.degraded) == ("chat", "high", None)
    lent_out = TierLoad((ReplicaStats(kv_occupancy=0.1, num_borrowed=16),))
    cut = decide(LENDING, request, None, {"reasoning": FULL, "chat": lent_out})
    assert (cut.tier, cut.effort, cut.degraded) == ("reasoning", "low", "budget:low")


def test_under_the_deadline_order_a_borrowed_request_sorts_after_every_own_request() -> None:
    deadline = with_setting(LENDING, "routing.priority_order", "deadline")
    late = RoutingRequest(prompt="p", reasoning_effort="low", arrival_s=10**6)
    borrowed = decide(deadline, RoutingRequest(prompt="p", arrival_s=0.0), score(0.95), {"reasoning": BUSY, "chat": IDLE})
    own = decide(deadline, late, None, {})
    assert borrowed.home == "reasoning" and borrowed.priority > own.priority


def test_a_compute_bound_tier_borrows_by_its_ongoing_requests_where_the_rule_counts_them() -> None:
    counted = with_setting(LENDING, "lending.0.borrow_above_ongoing_requests", "8")
    counted = with_setting(counted, "lending.0.lend_below_ongoing_requests", "4")
    request = RoutingRequest(prompt="p", reasoning_effort="high")
    crowded = TierLoad((ReplicaStats(kv_occupancy=0.05, num_running=8),))  # KV nearly empty: a CPU engine's picture
    assert decide(LENDING, request, None, {"reasoning": crowded, "chat": IDLE}).home is None  # KV rules alone: no
    assert decide(counted, request, None, {"reasoning": crowded, "chat": IDLE}).home == "reasoning"
    lender_crowded = TierLoad((ReplicaStats(kv_occupancy=0.05, num_running=4),))
    assert decide(counted, request, None, {"reasoning": crowded, "chat": lender_crowded}).home is None
