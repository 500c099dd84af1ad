"""Hardening rules without a server: tier calls retried once and bounded by deadlines, failover to the chat tier,
anonymous access under a policy with tenants, a dead engine's replica leaving the board and failing its health check."""

from __future__ import annotations

import asyncio
import pickle
import time
from typing import Any

import pytest

from thinktier.deployments.request.admission import Admission
from thinktier.deployments.request.decision import RoutingRequest
from thinktier.deployments.request.load_board import LoadBoard
from thinktier.deployments.request.openai_api import APIError
from thinktier.deployments.request.routing import decide, failover
from thinktier.deployments.request.tier_call import ClientLimit, Deadline, TierFailed, call_tier
from thinktier.deployments.tier.protocol import EngineDead, PromptTooLong, TierChunk, TierRequest
from thinktier.policies.loader import PolicyError, parse_policy

BASE = """
version: 1
tiers:
  reasoning:
    model: builtin:tiny-random
    engine: {kv_cache_memory_gib: 0.1}
  chat:
    model: builtin:tiny-random
    thinking: false
    engine: {kv_cache_memory_gib: 0.1}
    budgets:
      low: {thinking_tokens: 0, answer_tokens: 16}
      medium: {thinking_tokens: 0, answer_tokens: 32}
      high: {thinking_tokens: 0, answer_tokens: 48}
"""
POLICY = parse_policy(BASE, "p.yaml")
REQUEST = TierRequest(request_id="chatcmpl-1", thinking_tokens=4, answer_tokens=4, prompt="hi")
DONE = TierChunk(content="42", finish_reason="stop", answer_tokens=1)


class Call:
    """A fake Serve response: awaitable once, or a stream; `cancel()` is what Serve's handle offers."""

    def __init__(self, outcome: TierChunk | BaseException | None) -> None:
        self.outcome = outcome  # None: a stuck engine, it never answers
        self.cancelled = False

    async def _result(self) -> TierChunk:
        if self.outcome is None:
            await asyncio.sleep(3600)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        assert self.outcome is not None
        return self.outcome

    def __await__(self) -> Any:
        return self._result().__await__()

    async def __anext__(self) -> TierChunk:
        return await self._result()

    def cancel(self) -> None:
        self.cancelled = True


class Handle:
    """A fake tier DeploymentHandle that answers each call with the next outcome."""

    def __init__(self, *outcomes: TierChunk | BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.calls: list[tuple[TierRequest, Call]] = []
        self.generate_all = self.generate = self

    def options(self, stream: bool) -> Handle:
        return self

    def remote(self, request: TierRequest) -> Call:
        call = Call(self.outcomes.pop(0))
        self.calls.append((request, call))
        return call


def call(handle: Handle, streaming: bool = False, idle_s: float = 60, total_s: float = 600) -> tuple[TierChunk, Any]:
    deadline = Deadline(idle_s, time.monotonic() + total_s)
    return asyncio.run(call_tier(handle, "reasoning", REQUEST, streaming, deadline))


@pytest.mark.parametrize("streaming", [False, True])
def test_a_tier_call_that_fails_before_answering_is_retried_once_under_a_new_engine_request_id(streaming: bool) -> None:
    handle = Handle(RuntimeError("replica died"), DONE)
    first, stream = call(handle, streaming)
    assert first is DONE and (stream is not None) == streaming
    ids = [request.request_id for request, _ in handle.calls]
    assert len(ids) == 2 and ids[0] != ids[1] and all(i.startswith("chatcmpl-1.") for i in ids)


def test_a_tier_that_fails_twice_is_a_tier_failure_and_a_long_prompt_is_not_retried() -> None:
    with pytest.raises(TierFailed, match="failed the request 2 times: engine dead"):
        call(Handle(RuntimeError("engine dead"), RuntimeError("engine dead")))
    handle = Handle(PromptTooLong("prompt is 900 tokens"))
    with pytest.raises(APIError) as err:
        call(handle)
    assert (err.value.status, err.value.body["error"]["code"], len(handle.calls)) == (400, "context_length_exceeded", 1)


@pytest.mark.parametrize("streaming", [False, True])
def test_a_dead_engine_is_retried_only_where_its_tier_has_another_live_replica(streaming: bool) -> None:
    named: list[str] = []

    def engine_died(replica: str) -> bool:
        named.append(replica)
        return replica == "r1"  # r1's tier has another replica; r2 was the last one

    deadline = Deadline(60, time.monotonic() + 600)
    handle = Handle(EngineDead("r1"), DONE)
    assert asyncio.run(call_tier(handle, "reasoning", REQUEST, streaming, deadline, engine_died))[0] is DONE
    handle = Handle(EngineDead("r2"), DONE)
    with pytest.raises(TierFailed, match="'reasoning' has no live replica: the vLLM engine of replica r2 is dead"):
        asyncio.run(call_tier(handle, "reasoning", REQUEST, streaming, deadline, engine_died))
    assert len(handle.calls) == 1 and named == ["r1", "r2"]  # no retry to wait in Serve's queue for r2's replacement


@pytest.mark.parametrize(("streaming", "idle_s", "total_s"), [(True, 0.2, 600), (False, 600, 0.2)])
def test_a_stuck_tier_call_ends_at_its_deadline_with_a_504_and_is_cancelled(
    streaming: bool, idle_s: float, total_s: float
) -> None:
    handle = Handle(None)
    start = time.monotonic()
    with pytest.raises(APIError) as err:
        call(handle, streaming, idle_s, total_s)
    assert time.monotonic() - start < 5
    assert (err.value.status, err.value.body["error"]["code"]) == (504, "timeout")
    assert len(handle.calls) == 1 and handle.calls[0][1].cancelled  # not retried; the Serve request is cancelled


def test_a_clients_own_timeout_ends_the_call_before_serves_with_an_openai_shaped_408() -> None:
    server = POLICY.server
    client = ClientLimit.of({"x-request-timeout-seconds": "0.3"})
    deadline = Deadline.of(server, client=client)
    assert deadline.end == pytest.approx(client.arrived + 0.25)  # 50 ms before Serve's own 408
    handle = Handle(None)
    start = time.monotonic()
    with pytest.raises(APIError) as err:
        asyncio.run(call_tier(handle, "reasoning", REQUEST, False, deadline))
    assert time.monotonic() - start < 0.3
    assert (err.value.status, err.value.body["error"]["code"]) == (408, "request_timeout")
    assert "x-request-timeout-seconds, 0.3 s" in err.value.body["error"]["message"]
    assert handle.calls[0][1].cancelled
    for unusable in ({}, {"x-request-timeout-seconds": "0"}, {"x-request-timeout-seconds": "soon"}):
        assert Deadline.of(server, client=ClientLimit.of(unusable)).client_timeout_s is None  # the policy's deadline
    far = ClientLimit.of({"x-request-timeout-seconds": str(10 * server.tier_timeout_s)})
    assert Deadline.of(server, client=far).client_timeout_s is None  # the policy's limit comes first


def test_a_failed_or_down_reasoning_tier_fails_over_to_chat_where_the_policy_allows() -> None:
    routing = RoutingRequest(prompt="prove it", reasoning_effort="high")
    decision = decide(POLICY, routing, None, {})
    assert decision.tier == "reasoning"
    moved = failover(POLICY, routing, decision, "tier_failed", chat_live=True)
    assert moved is not None
    assert (moved.tier, moved.thinking_tokens, moved.degraded) == ("chat", 0, "chat:tier_failed")
    assert moved.headers()["x-thinktier-degraded"] == "chat:tier_failed"
    assert failover(POLICY, routing, decision, "tier_down", chat_live=False) is None
    assert failover(POLICY, routing, moved, "tier_failed", chat_live=True) is None  # the chat tier itself failed
    off = parse_policy(BASE + "degradation: {fallback_on_failure: false}\n", "p.yaml")
    assert failover(off, routing, decision, "tier_failed", chat_live=True) is None


KEYED = BASE + "tenants:\n  acme: {api_key_env: HARDENING_TEST_KEY}\n"


def test_once_a_tenant_has_a_key_anonymous_access_needs_an_explicit_true(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARDENING_TEST_KEY", "sk-1")
    admission = Admission()
    assert admission.tenant(POLICY, "") == "anonymous"  # no tenants: open, as before
    keyed = parse_policy(KEYED, "p.yaml")
    for header in ("", "Bearer", "Bearer  ", "bearer"):
        with pytest.raises(APIError) as err:
            admission.tenant(keyed, header)
        assert err.value.status == 401
    assert admission.in_flight(keyed) == {"acme": 0}  # anonymous is no label while it is refused
    opened = parse_policy(KEYED.replace("version: 1", "version: 1\nserver: {allow_anonymous: true}"), "p.yaml")
    assert admission.tenant(opened, "") == "anonymous" and admission.tenant(opened, "Bearer sk-1") == "acme"
    closed = parse_policy(BASE.replace("version: 1", "version: 1\nserver: {allow_anonymous: false}"), "p.yaml")
    with pytest.raises(APIError):
        admission.tenant(closed, "")


def test_anonymous_is_a_tenant_with_its_own_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    policy = parse_policy(
        KEYED.replace("version: 1", "version: 1\nserver: {allow_anonymous: true}")
        + "  anonymous: {max_concurrent_requests: 1, max_effort: low}\n", "p.yaml",
    )
    admission = Admission()
    assert admission.tenant(policy, "") == "anonymous"
    held = asyncio.run(admission.slot(policy, "anonymous"))
    with pytest.raises(APIError) as full:
        asyncio.run(admission.slot(policy, "anonymous"))
    assert full.value.status == 429 and admission.in_flight(policy) == {"acme": 0, "anonymous": 1}
    held.release()
    clipped = decide(policy, RoutingRequest(prompt="p", reasoning_effort="high", tenant="anonymous"), None, {})
    assert clipped.effort == "low"


@pytest.mark.parametrize(
    ("tenants", "problem"),
    [
        ("  anonymous: {max_effort: low}\n", "tenants.anonymous: sets limits of requests without a key"),
        ("  anonymous: {api_key_env: SOME_KEY}\n", "tenants.anonymous.api_key_env: the anonymous tenant is the one"),
        ("  beta: {max_effort: low}\n", "tenants.beta.api_key_env: required"),
    ],
)
def test_tenant_entries_that_cannot_work_are_refused(tenants: str, problem: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_policy(KEYED + tenants, "p.yaml")
    assert problem in str(err.value)


def test_an_anonymous_entry_applies_without_keyed_tenants_and_unknown_keys_are_anonymous_there() -> None:
    policy = parse_policy(BASE + "tenants:\n  anonymous: {max_concurrent_requests: 3}\n", "p.yaml")
    assert Admission().tenant(policy, "Bearer whatever") == "anonymous"


def test_a_dead_engines_replica_leaves_the_board_at_once() -> None:
    from thinktier.deployments.tier.replica_stats import ReplicaStats

    async def report_then_forget() -> dict[str, dict[str, ReplicaStats]]:
        board = LoadBoard(stale_after_s=60)
        await board.report("reasoning", "r1", ReplicaStats(num_running=3))
        await board.forget("reasoning", "r1")
        await board.forget("chat", "never-seen")
        return await board.replica_stats()

    assert asyncio.run(report_then_forget()) == {"reasoning": {}}


def test_a_tier_replica_with_a_dead_engine_leaves_the_board_then_fails_its_health_check_and_names_itself() -> None:
    from thinktier.deployments.tier.replica_stats import ReplicaStats
    from thinktier.deployments.tier.tier import LEAVE_BOARD_INTERVALS, TierReplica

    class Engine:
        errored = False

    class Tier:
        engine = Engine()

        def stats(self) -> ReplicaStats:
            return ReplicaStats(num_running=2)

        def shutdown(self) -> None:
            pass

    class Remote:
        def __init__(self, log: list[str], what: str) -> None:
            self.log, self.what = log, what

        async def remote(self, *args: object) -> None:
            self.log.append(self.what)

    log: list[str] = []
    board = type("Board", (), {"report": Remote(log, "report"), "forget": Remote(log, "forget")})()
    replica = object.__new__(TierReplica)
    replica.name, replica.engine, replica._board, replica._replica, replica._interval_s = "reasoning", Tier(), board, "r1", 0.01
    replica._left_board_at = None

    async def failed_request() -> None:
        raise ConnectionError("the engine core's socket closed")

    async def run() -> None:
        await replica.check_health()  # alive: passes
        reporter = replica._reporter = asyncio.ensure_future(replica._report_forever())
        await asyncio.sleep(0.05)
        Engine.errored = True
        await replica.check_health()  # dead, but still on the board: Serve must not take it out before the Ingresses know
        with pytest.raises(EngineDead, match="engine of replica r1 is dead") as dead, replica._dead_engine_named():
            await failed_request()
        assert dead.value.replica == "r1" and pickle.loads(pickle.dumps(dead.value)).replica == "r1"  # as Ray sends it
        await asyncio.wait_for(reporter, 2)  # the loop ends on its own
        await replica.check_health()  # just left the board: the Ingresses read it within an interval
        await asyncio.sleep(LEAVE_BOARD_INTERVALS * 0.01)
        with pytest.raises(RuntimeError, match="engine of replica r1 is dead"):
            await replica.check_health()

    asyncio.run(run())
    assert log[0] == "report" and log[-1] == "forget" and log.count("forget") == 1


def test_a_tier_replica_whose_warm_up_fails_shuts_its_engine_down(monkeypatch: pytest.MonkeyPatch) -> None:
    from thinktier.deployments.tier import tier as tier_module

    shut: list[str] = []

    class Engine:
        def __init__(self, name: str, tier: object, embed: object = None) -> None:
            self.name = name

        async def warmup(self) -> None:
            raise RuntimeError("CUDA out of memory")

        def shutdown(self) -> None:
            shut.append(self.name)

    context = type("Context", (), {"replica_id": type("Id", (), {"unique_id": "r1"})()})()
    monkeypatch.setattr(tier_module, "TierEngine", Engine)
    monkeypatch.setattr(tier_module.serve, "get_replica_context", lambda: context)
    replica = object.__new__(tier_module.TierReplica)
    with pytest.raises(RuntimeError, match="out of memory"):
        asyncio.run(replica.__init__("reasoning", POLICY.tiers["reasoning"], object(), 0.05))
    assert shut == ["reasoning"]  # the engine's process does not outlive the replica that failed to start
    replica.__del__()  # and the half-built replica's cleanup neither raises nor shuts the engine down twice
    assert shut == ["reasoning"]


def test_serve_config_backs_the_tier_deadline_checks_health_often_and_logs_json() -> None:
    from thinktier.cluster.serve_config import SERVE_TIMEOUT_MARGIN_S, serve_config

    deadline = "version: 1\nserver: {tier_timeout_s: 90}\nslos: {hard: {ttfvt_s: 60, e2e_s: 90}}"  # objectives within it
    policy = parse_policy(BASE.replace("version: 1", deadline), "p.yaml")
    config = serve_config(policy, "/etc/thinktier/policy.yaml")
    assert config["http_options"]["request_timeout_s"] == 90 + SERVE_TIMEOUT_MARGIN_S
    deployments = config["applications"][0]["deployments"]
    assert all(d["logging_config"] == {"encoding": "JSON"} for d in deployments)
    assert all(d["health_check_period_s"] <= 5 for d in deployments if d["name"].startswith("tier-"))
    text = parse_policy(BASE.replace("version: 1", "version: 1\nserver: {log_encoding: text}"), "p.yaml")
    assert {d["logging_config"]["encoding"] for d in serve_config(text, "/p")["applications"][0]["deployments"]} == {"TEXT"}


def test_the_drain_deadline_lets_tier_streams_run_that_long_and_the_ingress_a_little_longer() -> None:
    from thinktier.cluster.serve_config import serve_config
    from thinktier.deployments.request.ingress import INGRESS, INGRESS_DRAIN_MARGIN_S

    policy = parse_policy(BASE.replace("version: 1", "version: 1\nserver: {drain_timeout_s: 90}"), "p.yaml")
    deployments = {d["name"]: d for d in serve_config(policy, "/p")["applications"][0]["deployments"]}
    tiers = [d for name, d in deployments.items() if name.startswith("tier-")]
    assert tiers and all(d["graceful_shutdown_timeout_s"] == 90 for d in tiers)
    assert deployments[INGRESS]["graceful_shutdown_timeout_s"] == 90 + INGRESS_DRAIN_MARGIN_S
