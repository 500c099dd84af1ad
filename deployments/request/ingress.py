"""The HTTP front door: OpenAI routes, health, metrics; validation and auth before any model work."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable
from functools import partial
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, Histogram, generate_latest
from ray import serve
from ray.serve.context import _get_serve_request_context
from ray.serve.handle import DeploymentHandle

from thinktier.deployments.request import openai_api as oa
from thinktier.deployments.request.admission import Admission, Slot, bearer_key, matches
from thinktier.deployments.request.decision import HEADER_PREFIX, Decision, RoutingRequest
from thinktier.deployments.request.lending import returned
from thinktier.deployments.request.load_board import DEPARTED, BoardSlots, LoadBoard
from thinktier.deployments.request.metrics import IngressSnapshot, ServiceMetrics
from thinktier.deployments.request.routing import Overloaded, TierLoad, decide, failover
from thinktier.deployments.request.routing_view import BoardCalls, RoutingView, stale_after_s
from thinktier.deployments.request.scoring import difficulty_of, scorer
from thinktier.deployments.request.tier_call import ClientLimit, Deadline, TierFailed, TierStream, call_tier
from thinktier.deployments.serve_options import DRAIN_POLL_S, ServeOptions, light_options, replica_count_options
from thinktier.deployments.tier.protocol import TierChunk, TierRequest
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.loader import DEFAULT_POLICY
from thinktier.policies.schema import EarlyExit, Policy
from thinktier.policies.watcher import PolicyChange, PolicyWatcher

if TYPE_CHECKING:
    from thinktier.deployments.classifier.classifier import DifficultyClassifier
    from thinktier.deployments.tier.tier import TierReplica

logger = logging.getLogger("ray.serve")
INGRESS = "Ingress"
"""The deployment's name."""
INGRESS_DRAIN_MARGIN_S = 5
"""A stopping Ingress waits this much longer than server.drain_timeout_s (the tiers' drain): a tier stream cut at the
drain deadline still reaches its client as an SSE error event and [DONE], not as a dropped connection."""
AUTO_MODELS = frozenset({"thinktier", "auto"})
"""Model names that let the router pick the tier."""

app = FastAPI(title="thinktier", description="OpenAI-compatible reasoning service with difficulty-tiered serving.")


async def sse_body(
    framer: oa.SSEFramer, first: TierChunk, stream: TierStream, tracker: _Request, slot: Slot, deadline: Deadline
) -> AsyncIterator[str]:
    """The SSE body: one event per (coalesced) chunk of the tier's stream. A failure after the stream started (its 200 is
    gone) ends it with an OpenAI error event and [DONE], never silently; so does a tier that sends nothing within the
    deadline. On any early end (the client went away, an error) the tier's stream is cancelled, which aborts the engine
    request."""
    chunk = first
    async with slot:
        try:
            tracker.saw(chunk)
            yield framer.start() + framer.events(chunk)
            while chunk.finish_reason is None:
                chunk = await asyncio.wait_for(stream.__anext__(), deadline.chunk_s())
                tracker.saw(chunk)
                yield framer.events(chunk)
            tracker.finished(chunk)
            yield oa.SSE_DONE
        except TimeoutError:
            tracker.failed()
            logger.warning("stream %s: %s", framer.request_id, deadline.message())
            code = "timeout" if deadline.client_timeout_s is None else "request_timeout"
            yield oa.sse_error(deadline.message(), framer.request_id, code=code)
            yield oa.SSE_DONE
        except Exception:  # StopAsyncIteration too: a tier stream that ends without a finish reason
            tracker.failed()
            logger.exception("stream %s failed after it started", framer.request_id)
            yield oa.sse_error("the stream failed after it started; the answer is incomplete", framer.request_id)
            yield oa.SSE_DONE
        finally:
            if chunk.finish_reason is None:
                stream.cancel()
            if tracker.outcome is None:  # neither finished nor failed: the client went away mid-stream
                tracker.abandoned()


def certainty_exit(settings: EarlyExit, agree: int | None) -> EarlyExit | None:
    """The tier's certainty-exit settings with the decision's agreement count; None when the decision has it off."""
    return None if agree is None else settings.model_copy(update={"agree": agree})


async def _prepend(first: str, rest: AsyncIterator[str]) -> AsyncIterator[str]:
    yield first
    async for item in rest:
        yield item


class _Request:
    """One client request on its way through the service: timing and outcome for the metrics."""

    def __init__(self, metrics: ServiceMetrics, decision: Decision) -> None:
        self.metrics = metrics
        self.decision = decision
        self.start = time.monotonic()
        self.first_token: float | None = None
        self.first_visible: float | None = None
        self.outcome: str | None = None
        """The outcome counted for this request (thinktier_requests_total's label); None until it ends."""

    def saw(self, chunk: TierChunk) -> None:
        now = time.monotonic()
        if self.first_token is None and (chunk.reasoning or chunk.content):
            self.first_token = now
            self._latency(self.metrics.ttft, now - self.start)
        if self.first_visible is None and chunk.content:
            self.first_visible = now
            self._latency(self.metrics.ttfvt, now - self.start)

    def finished_whole(self, whole: TierChunk, dispatched: float) -> None:
        """A non-streamed completion: first-token times are the wait until dispatch plus the engine's own."""
        waited = dispatched - self.start
        if whole.first_token_s is not None:
            self._latency(self.metrics.ttft, waited + whole.first_token_s)
        if whole.first_visible_s is not None:
            self._latency(self.metrics.ttfvt, waited + whole.first_visible_s)
        self.finished(whole)

    def _latency(self, histogram: Histogram, seconds: float) -> None:
        """Latencies go by tier and by the difficulty class the router decided: each class has its own objective."""
        histogram.labels(self.decision.tier, self.decision.difficulty).observe(seconds)

    def _count(self, outcome: str) -> None:
        self.outcome = outcome
        self.metrics.requests.labels(self.decision.tier, outcome).inc()

    def failed(self) -> None:
        self._count("error")

    def abandoned(self) -> None:
        """The client closed the stream before its end: the engine request was aborted; not an error of the service."""
        self._count("abandoned")

    def finished(self, last: TierChunk) -> None:
        m, tier = self.metrics, self.decision.tier
        self._count("ok")
        self._latency(m.e2e, time.monotonic() - self.start)
        m.thinking_tokens.labels(tier).observe(last.reasoning_tokens)
        m.answer_tokens.labels(tier).observe(last.answer_tokens)
        if last.budget_forced:
            m.budget_forced.labels(tier).inc()
        # every finished request touches its class's series, so a class never preempted reads 0, not "no data"
        m.preemptions.labels(tier, self.decision.difficulty).inc(last.preemptions)
        if last.economy is not None:
            m.economy(tier, last.economy)


@serve.ingress(app)
class Ingress:
    """The flow of a request: validate, admit (deployments/request/admission.py: tenant, slot), route
    (deployments/request/routing.py, in this process: no extra hop), then stream from the chosen tier. Tier load
    comes from the LoadBoard, refreshed in the background."""

    @classmethod
    def deployment_options(cls, policy: Policy) -> ServeOptions:
        """Light replicas (HTTP, routing, SSE framing), each with many requests in flight: as many as
        server.ingress_replicas says, between its min and max by Ray Serve's ongoing-requests autoscaling."""
        server = policy.server
        return light_options(INGRESS, max_ongoing_requests=1024) | {
            "graceful_shutdown_timeout_s": server.drain_timeout_s + INGRESS_DRAIN_MARGIN_S,
            "graceful_shutdown_wait_loop_s": DRAIN_POLL_S,
            **replica_count_options(server.ingress_replicas, target_ongoing_requests=server.ingress_target_ongoing_requests),
        }

    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor; mypy wants __init__ to return None
        self, policy: Policy, policy_path: str | None, board: DeploymentHandle[LoadBoard],
        tiers: dict[str, DeploymentHandle[TierReplica]], classifier: DeploymentHandle[DifficultyClassifier] | None = None,
    ) -> None:
        self.policy = policy
        self.board = board
        self.tiers = tiers
        self.score = scorer(policy.routing.classifier, classifier)
        self._view = RoutingView(stale_after_s(policy))
        self._replica = serve.get_replica_context().replica_id.unique_id
        self._peer_metrics: dict[str, IngressSnapshot] = {}
        self.admission = Admission(BoardSlots(board, self._replica, lambda: self.policy.server.load_board_timeout_s),
                                   self._shared_slots_failed)
        self._watcher = PolicyWatcher(policy_path or DEFAULT_POLICY, self._reload, policy=policy)
        self._watcher.start()
        self.metrics = ServiceMetrics(
            lambda: self._view.stats, lambda: self._watcher.reloads, lambda: self.admission.in_flight(self.policy),
            lambda: self._peer_metrics,
        )
        self._board_calls = BoardCalls(self.metrics.load_board_errors, self._view.max_age_s)
        self._refresher = asyncio.get_running_loop().create_task(self._refresh_loads())

    def _reload(self, policy: Policy, change: PolicyChange) -> None:
        self.policy = policy

    def _shared_slots_failed(self, exc: Exception) -> None:
        self.metrics.load_board_errors.labels("acquire_slot").inc()
        logger.warning("the load board did not count a tenant's slot (%s: %s); holding the tenant to this replica's "
                       "share of its limit", type(exc).__name__, exc)

    async def _refresh_loads(self) -> None:
        """Read the board's view and trade metrics every stats interval. A failed call (the board restarting, stuck,
        past its deadline) is counted and logged (BoardCalls); meanwhile routing keeps the last view until it is stale
        (RoutingView)."""
        interval = min(tier.autoscaling.metrics_interval_s for tier in self.policy.tiers.values())
        while True:
            self._board_calls.round({"replica_stats": await self._attempt(self._read_board()),
                                     "exchange_metrics": await self._attempt(self._exchange_metrics()),
                                     "sync_slots": await self._attempt(self._sync_slots())})
            await asyncio.sleep(interval)

    @staticmethod
    async def _attempt(call: Awaitable[Any]) -> bool:
        try:
            await call
        except Exception:  # any failure of a board call: counted and logged by the caller
            return False
        return True

    async def _read_board(self) -> dict[str, dict[str, ReplicaStats]]:
        """The load board's view (kept for routing and /metrics), within server.load_board_timeout_s."""
        timeout_s = self.policy.server.load_board_timeout_s
        stats: dict[str, dict[str, ReplicaStats]] = await asyncio.wait_for(self.board.replica_stats.remote(), timeout_s)
        self._view.update(stats, time.monotonic())
        return stats

    async def _exchange_metrics(self) -> None:
        """This replica's request-level metrics to the board, the other Ingress replicas' back (for /metrics)."""
        exchange = self.board.exchange_ingress_metrics.remote(self._replica, self.metrics.snapshot())
        self._peer_metrics = await asyncio.wait_for(exchange, self.policy.server.load_board_timeout_s)

    async def _sync_slots(self) -> None:
        """The tenant slots this replica holds or has asked for, to the board's service-wide count."""
        sync = self.board.sync_slots.remote(self._replica, self.admission.held_slots())
        await asyncio.wait_for(sync, self.policy.server.load_board_timeout_s)

    def _down(self, tier: str | None) -> bool:
        """Whether the load board has seen `tier` and now lists no live replica of it (Serve is replacing them). A
        tier that may scale to zero is never down: a request there waits for a replica (`_cold`)."""
        return self._view.down(tier, time.monotonic()) and not self._may_scale_to_zero(tier)

    def _may_scale_to_zero(self, tier: str | None) -> bool:
        return tier in self.policy.tiers and self.policy.tiers[tier].replicas.min == 0

    def _cold(self, tier: str) -> bool:
        """Whether a request to `tier` waits for Serve to start its first replica: the tier may scale to zero and the
        board's (fresh) view lists no live replica of it."""
        return self._may_scale_to_zero(tier) and self._view.fresh(time.monotonic()) and not self._view.stats.get(tier)

    def _loads(self) -> dict[str, TierLoad]:
        return self._view.loads(time.monotonic())

    # ---- the flow ------------------------------------------------------------------------------------------------

    async def _body(self, request: Request, policy: Policy) -> bytes:
        """The body within server.body_read_timeout_s (a body trickled in byte by byte gets a 408, not the Ingress)."""
        timeout_s = policy.server.body_read_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                return await self._read_body(request, policy.server.max_body_bytes)
        except TimeoutError:
            raise oa.APIError(408, f"the request body did not arrive within {timeout_s:g} s (policy: "
                              "server.body_read_timeout_s)", code="request_timeout") from None

    async def _read_body(self, request: Request, limit: int) -> bytes:
        """The body, read no further than the limit: a declared or streamed body past it is refused unread."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > limit:
            raise oa.APIError(413, f"request body is {declared} bytes; the limit is {limit}", code="body_too_large")
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > limit:
                raise oa.APIError(413, f"request body is over {limit} bytes, the limit", code="body_too_large")
        return bytes(body)

    async def _decide(self, parsed: oa.OpenAIRequest, tenant: str, policy: Policy) -> tuple[Decision, RoutingRequest]:
        requested = policy.tier_for_model(parsed.model)
        if requested is None and parsed.model not in AUTO_MODELS:
            raise oa.APIError(404, f"model {parsed.model!r} does not exist; GET /v1/models lists the models",
                              param="model", code="model_not_found")
        routing = RoutingRequest(
            prompt=parsed.prompt_text(),
            model=parsed.model if requested else None,
            reasoning_effort=parsed.effort,
            max_thinking_tokens=parsed.max_thinking_tokens,
            max_answer_tokens=parsed.answer_cap,
            samples=parsed.samples,
            tenant=tenant,
            thinking_off=parsed.thinking_off,
            early_stop=parsed.early_stop,
            early_stop_agree=parsed.early_stop_agree,
            arrival_s=time.time(),
        )
        difficulty = None
        classifier = policy.routing.classifier
        if self.score is not None and classifier.enabled and not routing.thinking_off:
            difficulty = await difficulty_of(self.score, routing.prompt, classifier.timeout_s, self.metrics)
        try:
            decision = decide(policy, routing, difficulty, self._loads())
        except Overloaded as shed:
            self.metrics.requests.labels("none", "shed").inc()
            raise oa.APIError(429, str(shed), "rate_limit_error", code="overloaded",
                              headers={"Retry-After": str(shed.retry_after_s)}) from None
        self.metrics.decisions.labels(decision.tier, decision.effort, decision.reason).inc()
        if decision.degraded:
            self.metrics.degraded.labels(decision.degraded.split(":")[0]).inc()
        if decision.home:
            self.metrics.borrowed.labels(decision.home, decision.tier).inc()
        return decision, routing

    async def _serve(self, request: Request, kind: type[oa.OpenAIRequest]) -> Response:
        """Who is calling first (401 before the body is read), then the body within its limit (413), then the request
        itself (400), then a slot (429). Every failure is an OpenAI-shaped JSON error. The completion's id and the
        logs carry Serve's request id, which Serve returns in `x-request-id` (a client may set it)."""
        serve_id = _get_serve_request_context().request_id or uuid.uuid4().hex
        request_id = f"{'chatcmpl' if kind is oa.ChatCompletionRequest else 'cmpl'}-{serve_id}"
        return await self._answer(request, kind, request_id)

    async def _answer(self, request: Request, kind: type[oa.OpenAIRequest], request_id: str) -> Response:
        policy = self.policy  # one policy from start to end, whatever a reload does meanwhile
        client = ClientLimit.of(request.headers)
        try:
            tenant = self.admission.tenant(policy, request.headers.get("authorization", ""))
            parsed = oa.parse_request(await self._body(request, policy), kind)
            slot = await self._slot(tenant, policy)
        except oa.APIError as err:
            return JSONResponse(err.body, status_code=err.status, headers=err.headers)
        streaming = False
        try:
            decision, routing = await self._decide(parsed, slot.tenant, policy)
            response = await self._serve_decided(parsed, kind, routing, decision, slot, request_id, policy, client)
            streaming = isinstance(response, StreamingResponse)
            return response
        except oa.APIError as err:
            return JSONResponse(err.body, status_code=err.status, headers=err.headers)
        except TierFailed as failed:
            logger.error("request %s: %s", request_id, failed)
            unavailable = oa.APIError(503, f"{failed}; retry later", "server_error", code="tier_failed",
                                      headers={"Retry-After": str(policy.degradation.retry_after_s)})
            return JSONResponse(unavailable.body, status_code=unavailable.status, headers=unavailable.headers)
        except Exception:  # a server fault still answers in the API's shape; cancellation passes through
            logger.exception("request %s failed", request_id)
            fault = oa.APIError(500, "the server failed to serve this request; it was logged", "server_error")
            return JSONResponse(fault.body, status_code=fault.status)
        finally:
            if not streaming:  # a started stream gives the slot back when it ends
                slot.release()

    async def _slot(self, tenant: str, policy: Policy) -> Slot:
        """A slot for the tenant (429 past its limit across the service), counted per tenant either way."""
        try:
            replicas = 1 + len(self._peer_metrics.keys() - {DEPARTED})
            slot = await self.admission.slot(policy, tenant, replicas)
        except oa.APIError:
            self.metrics.tenant_requests.labels(tenant, "throttled").inc()
            raise
        self.metrics.tenant_requests.labels(tenant, "admitted").inc()
        return slot

    async def _serve_decided(
        self, parsed: oa.OpenAIRequest, kind: type[oa.OpenAIRequest], routing: RoutingRequest, decision: Decision,
        slot: Slot, request_id: str, policy: Policy, client: ClientLimit,
    ) -> Response:
        """The decided tier serves the request; a tier that is down, or that failed it twice before anything was sent,
        hands it to the chat tier with thinking off where the policy allows (routing.failover). A borrowed request goes
        back to its own tier instead."""
        down = self._down(decision.tier)
        if down and decision.home:
            decision = returned(policy, decision)
        elif down:
            decision = self._failover(routing, decision, "tier_down", policy) or decision
        try:
            return await self._dispatch(parsed, kind, decision, slot, request_id, policy, client)
        except TierFailed:
            if decision.home:
                return await self._dispatch(parsed, kind, returned(policy, decision), slot, request_id, policy, client)
            fallback = self._failover(routing, decision, "tier_failed", policy)
            if fallback is None:
                raise
            return await self._dispatch(parsed, kind, fallback, slot, request_id, policy, client)

    def _failover(self, routing: RoutingRequest, decision: Decision, why: str, policy: Policy) -> Decision | None:
        chat_live = not self._down(policy.routing.chat_tier)
        fallback = failover(policy, routing, decision, why, chat_live)
        if fallback is not None:
            logger.warning("request for tier %s served by the chat tier: %s", decision.tier, why)
            self.metrics.degraded.labels("chat").inc()
        return fallback

    async def _dispatch(
        self, parsed: oa.OpenAIRequest, kind: type[oa.OpenAIRequest], decision: Decision, slot: Slot, request_id: str,
        policy: Policy, client: ClientLimit,
    ) -> Response:
        chat = kind is oa.ChatCompletionRequest
        tier = policy.tiers[decision.home_tier]  # a borrowed request keeps its own tier's limits and settings
        tier_request = TierRequest(
            request_id=request_id,  # call_tier makes it unique per attempt: the engine keys its requests (and aborts) by it
            thinking_tokens=decision.thinking_tokens,
            answer_tokens=decision.answer_tokens,
            priority=decision.priority,
            difficulty=decision.difficulty,
            messages=parsed.message_dicts() if isinstance(parsed, oa.ChatCompletionRequest) else None,
            prompt=parsed.prompt_text() if isinstance(parsed, oa.CompletionRequest) else None,
            max_prompt_tokens=tier.max_prompt_tokens,
            temperature=parsed.temperature,
            top_p=parsed.top_p,
            seed=parsed.seed,
            stop=parsed.stop_list,
            cache_salt=f"tenant:{slot.tenant}",
            samples=decision.samples,
            consensus=decision.consensus,
            staged=decision.staged,
            text_similarity=tier.voting.text_similarity,
            certainty_exit=certainty_exit(tier.early_exit, decision.certainty_agree),
            progress=parsed.stream,
            borrowed=decision.home is not None,
        )
        tracker = _Request(self.metrics, decision)
        model = policy.served_name(decision.tier)
        cold = self._cold(decision.tier)
        deadline = Deadline.of(policy.server, cold_start=cold, client=client)
        dispatched = time.monotonic()
        try:
            first, stream = await call_tier(self.tiers[decision.tier], decision.tier, tier_request, parsed.stream, deadline,
                                            partial(self._view.engine_died, decision.tier))
        except oa.APIError as err:  # the prompt is too long (400), or the tier passed its deadline (504)
            self.metrics.requests.labels(decision.tier, "client_error" if err.status < 500 else "timeout").inc()
            raise
        except TierFailed:
            self.metrics.requests.labels(decision.tier, "error").inc()
            raise
        headers = decision.headers() | {HEADER_PREFIX + "replica": first.replica or ""}
        if cold:
            headers[HEADER_PREFIX + "cold-start-s"] = f"{time.monotonic() - dispatched:.1f}"
        if stream is None:  # not streamed: `first` is the whole completion
            tracker.finished_whole(first, dispatched)
            make = oa.chat_completion if chat else oa.text_completion
            headers |= {HEADER_PREFIX + k: v for k, v in oa.economy_headers(first).items()}
            return JSONResponse(make(request_id, model, first), headers=headers)
        framer = oa.SSEFramer(chat, request_id, model, parsed.include_usage)
        body = sse_body(framer, first, stream, tracker, slot, deadline)
        opening = await body.__anext__()  # started: from here the stream's own `async with slot` gives the slot back
        return StreamingResponse(_prepend(opening, body), media_type="text/event-stream", headers=headers)

    # ---- routes --------------------------------------------------------------------------------------------------

    @app.post("/v1/chat/completions")
    async def chat_completions(self, request: Request) -> Response:
        return await self._serve(request, oa.ChatCompletionRequest)

    @app.post("/v1/completions")
    async def completions(self, request: Request) -> Response:
        return await self._serve(request, oa.CompletionRequest)

    @app.get("/v1/models")
    async def models(self) -> dict[str, Any]:
        names = [*sorted(AUTO_MODELS), *(self.policy.served_name(t) for t in self.policy.tiers)]
        return {"object": "list", "data": [{"id": n, "object": "model", "created": 0, "owned_by": "thinktier"} for n in names]}

    @app.get("/healthz")
    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz")
    async def readyz(self) -> JSONResponse:
        """Ready while every tier has a live replica, one whose engine reports (a dead engine's replica leaves the
        board at once, deployments/tier/tier.py), or may scale to zero (a request there waits for one)."""
        try:
            stats = await self._read_board()
        except Exception:  # past its deadline, or restarting: readiness unknown is not ready
            return JSONResponse({"ready": False, "error": "the load board did not answer"}, status_code=503)
        tiers = {tier: len(stats.get(tier, {})) for tier in self.policy.tiers}
        ready = all(count or self._may_scale_to_zero(tier) for tier, count in tiers.items())
        return JSONResponse({"ready": ready, "replicas": tiers}, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def metrics_text(self, request: Request) -> Response:
        """Prometheus text; behind a key when the policy names one (server.metrics_api_key_env)."""
        try:
            self._check_metrics_key(request.headers.get("authorization", ""))
        except oa.APIError as err:
            return JSONResponse(err.body, status_code=err.status, headers=err.headers)
        with contextlib.suppress(Exception):  # past its deadline, the engine figures of the last view
            await self._read_board()
        with contextlib.suppress(Exception):  # likewise the other Ingress replicas' counts
            await self._exchange_metrics()
        return PlainTextResponse(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)

    def _check_metrics_key(self, authorization: str) -> None:
        env = self.policy.server.metrics_api_key_env
        if env is not None and not matches(bearer_key(authorization), env):
            raise oa.APIError(401, "GET /metrics needs the metrics key (policy: server.metrics_api_key_env): send "
                              "'Authorization: Bearer <key>'", "authentication_error", code="invalid_api_key")
