"""The Ingress's edges: OpenAI fields it does not implement are refused by name (their defaults pass); a failing or
slow classifier routes the request without a score instead of failing it; a stream its client leaves is counted and
its tier call cancelled; a load board that stops answering is counted and logged, and routing stops acting on its old
numbers once they are stale."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from prometheus_client import generate_latest

from thinktier.deployments.request import openai_api as oa
from thinktier.deployments.request.admission import Admission
from thinktier.deployments.request.decision import Decision, DifficultyScore
from thinktier.deployments.request.ingress import _Request, sse_body
from thinktier.deployments.request.metrics import ServiceMetrics
from thinktier.deployments.request.routing_view import BoardCalls, RoutingView, stale_after_s
from thinktier.deployments.request.scoring import difficulty_of
from thinktier.deployments.request.tier_call import Deadline
from thinktier.deployments.tier.protocol import TierChunk
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.loader import load_policy

# ---- unsupported OpenAI fields -------------------------------------------------------------------------------------


CHAT: dict[str, Any] = {"model": "thinktier", "messages": [{"role": "user", "content": "What is 2 + 2?"}]}


def _parse(**fields: Any) -> oa.ChatCompletionRequest:
    return oa.parse_request(json.dumps(CHAT | fields).encode(), oa.ChatCompletionRequest)


@pytest.mark.parametrize(("name", "value", "asks_for"), [
    ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}], "tool calling"),
    ("tool_choice", "required", "tool calling"),
    ("response_format", {"type": "json_object"}, "structured output"),
    ("logprobs", True, "log probabilities"),
    ("top_logprobs", 5, "log probabilities"),
    ("logit_bias", {"50256": -100}, "logit bias"),
    ("presence_penalty", 0.5, "sampling penalties"),
    ("frequency_penalty", -1, "sampling penalties"),
    ("best_of", 3, "best-of sampling"),
])
def test_a_field_asking_for_what_is_not_implemented_is_refused_by_name(name: str, value: Any, asks_for: str) -> None:
    with pytest.raises(oa.APIError) as refused:
        _parse(**{name: value})
    error = refused.value
    assert error.status == 400 and error.body["error"]["param"] == name
    assert error.body["error"]["code"] == "unsupported_parameter"
    assert f"`{name}` is not supported" in error.body["error"]["message"] and asks_for in error.body["error"]["message"]


def test_the_defaults_clients_send_for_those_fields_pass() -> None:
    parsed = _parse(tools=[], tool_choice="none", response_format={"type": "text"}, logprobs=False, top_logprobs=0,
                    logit_bias={}, presence_penalty=0, frequency_penalty=0.0, best_of=1, echo=False, suffix=None)
    assert parsed.prompt_text() == "What is 2 + 2?"
    with pytest.raises(oa.APIError, match="`logprobs` is not supported"):
        _parse(logprobs=1)  # the completions API's count of log probabilities: it asks for some


# ---- the classifier call -------------------------------------------------------------------------------------------


HARD = DifficultyScore(0.9, {"easy": 0.0, "medium": 0.1, "hard": 0.9}, "test")


def scores(outcome: DifficultyScore | BaseException | None) -> Callable[[str], Awaitable[DifficultyScore | None]]:
    """A classifier that answers, fails or hangs."""

    async def score(prompt: str) -> DifficultyScore | None:
        if outcome is None:
            await asyncio.sleep(60)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    return score


def _counted(metrics: ServiceMetrics, sample: str) -> float:
    line = next(ln for ln in generate_latest(metrics.registry).decode().splitlines() if ln.startswith(sample))
    return float(line.split()[-1])


def test_a_failing_classifier_routes_without_a_score_and_is_counted() -> None:
    metrics = ServiceMetrics(dict, dict)
    assert asyncio.run(difficulty_of(scores(RuntimeError("replica died")), "prove it", 1.0, metrics)) is None
    assert _counted(metrics, "thinktier_classifier_failures_total") == 1
    assert _counted(metrics, "thinktier_classifier_timeouts_total") == 0


def test_a_slow_classifier_is_a_timeout_and_a_working_one_gives_its_score() -> None:
    metrics = ServiceMetrics(dict, dict)
    assert asyncio.run(difficulty_of(scores(None), "prove it", 0.05, metrics)) is None
    assert asyncio.run(difficulty_of(scores(HARD), "prove it", 1.0, metrics)) == HARD
    assert _counted(metrics, "thinktier_classifier_timeouts_total") == 1
    assert _counted(metrics, "thinktier_classifier_failures_total") == 0
    assert _counted(metrics, 'thinktier_classifier_decisions_total{difficulty="hard"') == 1


# ---- a stream its client leaves ------------------------------------------------------------------------------------


class Stream:
    """A tier stream that keeps thinking until it is cancelled."""

    def __init__(self) -> None:
        self.cancelled = False

    async def __anext__(self) -> TierChunk:
        await asyncio.sleep(0.01)
        return TierChunk(reasoning="still thinking ")

    def cancel(self) -> None:
        self.cancelled = True


def test_a_stream_the_client_leaves_is_counted_as_abandoned_and_its_tier_call_cancelled() -> None:
    metrics = ServiceMetrics(dict, dict)
    decision = Decision(tier="reasoning", effort="high", difficulty="hard", thinking_tokens=100, answer_tokens=10,
                        samples=1, consensus=1, certainty_agree=None, priority=2, reason="test")
    stream, admission = Stream(), Admission()

    async def client_leaves_after_two_events() -> None:
        slot = await admission.slot(load_policy(), "anonymous")
        body = sse_body(oa.SSEFramer(True, "chatcmpl-1", "m", False), TierChunk(reasoning="Let me see. "), stream,  # type: ignore[arg-type]
                        _Request(metrics, decision), slot, Deadline(60, time.monotonic() + 600))
        await body.__anext__()
        await body.__anext__()
        await body.aclose()  # what Starlette does when the client disconnects

    asyncio.run(client_leaves_after_two_events())
    text = generate_latest(metrics.registry).decode()
    assert 'thinktier_requests_total{outcome="abandoned",tier="reasoning"} 1.0' in text
    assert 'outcome="error"' not in text and 'outcome="ok"' not in text
    # the engine request is aborted and the tenant's slot given back
    assert stream.cancelled and admission.in_flight(load_policy()) == {"anonymous": 0}


# ---- the routing view and the load board's calls -------------------------------------------------------------------


FULL = {"reasoning": {"r1": ReplicaStats(kv_occupancy=0.99)}, "chat": {}}


def test_a_stale_view_gives_no_load_and_no_tier_down() -> None:
    view = RoutingView(max_age_s=10)
    assert view.loads(0.0) == {} and not view.down("chat", 0.0)  # nothing read yet
    view.update(FULL, now=100.0)
    assert view.loads(105.0)["reasoning"].saturated(0.9, 1000) and view.down("chat", 105.0)
    assert view.loads(111.0) == {} and not view.down("chat", 111.0)  # 11 s old: stale


def test_a_replica_found_dead_leaves_the_view_until_the_board_drops_it_too() -> None:
    view = RoutingView(max_age_s=10)
    two = {"reasoning": {"r1": ReplicaStats(), "r2": ReplicaStats()}, "chat": {"c1": ReplicaStats()}}
    view.update(two, now=100.0)
    assert view.engine_died("reasoning", "r1")  # r2 lives: a retry may go there
    assert not view.engine_died("reasoning", "r2") and view.down("reasoning", 100.5)  # the last one: fail over
    view.update(two, now=101.0)  # the board has not heard yet: the dead stay out
    assert view.down("reasoning", 101.0) and len(view.loads(101.0)["chat"].replicas) == 1
    view.update({"reasoning": {"r3": ReplicaStats()}, "chat": {}}, now=102.0)  # replaced
    assert not view.down("reasoning", 102.0) and view.dead == set()


def test_the_view_is_stale_after_as_long_as_the_board_keeps_a_report() -> None:
    policy = load_policy()
    longest = max(t.autoscaling.metrics_interval_s for t in policy.tiers.values())
    assert stale_after_s(policy) == 5 * longest


def test_failed_board_calls_are_counted_by_call_and_logged_when_failing_starts_and_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = ServiceMetrics(dict, dict)
    calls = BoardCalls(metrics.load_board_errors, stale_after_s=10)
    with caplog.at_level(logging.INFO, logger="ray.serve"):
        for _ in range(3):
            calls.round({"replica_stats": False, "exchange_metrics": True})
        calls.round({"replica_stats": True, "exchange_metrics": True})
    text = generate_latest(metrics.registry).decode()
    assert 'thinktier_load_board_errors_total{call="replica_stats"} 3.0' in text and 'call="exchange_metrics"' not in text
    assert [r.getMessage().split(";")[0] for r in caplog.records] == [
        "the load board did not answer (replica_stats)", "the load board answers again"]
