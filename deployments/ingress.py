"""The HTTP front door: OpenAI routes, health, metrics; validation and auth before any model work."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments import openai_api as oa
from deployments.decision import HEADER_PREFIX, Decision, RoutingRequest
from deployments.engine import PromptTooLong, TierChunk, TierRequest
from deployments.metrics import ServiceMetrics
from deployments.replica_stats import ReplicaStats
from deployments.routing import Overloaded, TierLoad, decide
from policies.loader import DEFAULT_POLICY
from policies.schema import Policy
from policies.watcher import PolicyChange, PolicyWatcher

AUTO_MODELS = frozenset({"thinktier", "auto"})
"""Model names that let the router pick the tier."""

app = FastAPI(title="thinktier", description="OpenAI-compatible reasoning service with difficulty-tiered serving.")


def _cause(exc: BaseException) -> BaseException:
    """The user exception inside a Ray error (Ray wraps exceptions raised in other replicas)."""
    return getattr(exc, "cause", None) or exc


class _Request:
    """One client request on its way through the service: timing and outcome for the metrics."""

    def __init__(self, metrics: ServiceMetrics, decision: Decision) -> None:
        self.metrics = metrics
        self.decision = decision
        self.start = time.monotonic()
        self.first_token: float | None = None
        self.first_visible: float | None = None

    def saw(self, chunk: TierChunk) -> None:
        now = time.monotonic()
        if self.first_token is None and (chunk.reasoning or chunk.content):
            self.first_token = now
            self.metrics.ttft.labels(self.decision.tier).observe(now - self.start)
        if self.first_visible is None and chunk.content:
            self.first_visible = now
            self.metrics.ttfvt.labels(self.decision.tier).observe(now - self.start)

    def finished_whole(self, whole: TierChunk, dispatched: float) -> None:
        """A non-streamed completion: first-token times are the wait until dispatch plus the engine's own."""
        tier, waited = self.decision.tier, dispatched - self.start
        if whole.first_token_s is not None:
            self.metrics.ttft.labels(tier).observe(waited + whole.first_token_s)
        if whole.first_visible_s is not None:
            self.metrics.ttfvt.labels(tier).observe(waited + whole.first_visible_s)
        self.finished(whole)

    def finished(self, last: TierChunk) -> None:
        m, tier = self.metrics, self.decision.tier
        m.requests.labels(tier, "ok").inc()
        m.e2e.labels(tier).observe(time.monotonic() - self.start)
        m.thinking_tokens.labels(tier).observe(last.reasoning_tokens)
        m.answer_tokens.labels(tier).observe(last.answer_tokens)
        if last.budget_forced:
            m.budget_forced.labels(tier).inc()


@serve.deployment
@serve.ingress(app)
class Ingress:
    """Validates, authenticates and routes (deployments/routing.py, in this process: no extra hop), then
    streams from the chosen tier. Tier load comes from the LoadBoard, refreshed in the background."""

    async def __init__(
        self, policy: Policy, policy_path: str | None, board: DeploymentHandle, tiers: dict[str, DeploymentHandle],
        classifier: DeploymentHandle | None = None,
    ) -> None:
        self.policy = policy
        self.board = board
        self.tiers = tiers
        self.classifier = classifier
        self._replica_stats: dict[str, dict[str, ReplicaStats]] = {}
        self._in_flight: dict[str, int] = {}
        self._watcher = PolicyWatcher(policy_path or DEFAULT_POLICY, self._reload, policy=policy)
        self._watcher.start()
        self.metrics = ServiceMetrics(lambda: self._replica_stats, lambda: self._watcher.reloads)
        self._refresher = asyncio.get_running_loop().create_task(self._refresh_loads())

    def _reload(self, policy: Policy, change: PolicyChange) -> None:
        self.policy = policy

    async def _refresh_loads(self) -> None:
        interval = min(tier.autoscaling.metrics_interval_s for tier in self.policy.tiers.values())
        while True:
            with contextlib.suppress(Exception):  # the board may be restarting; routing uses the last view meanwhile
                self._replica_stats = await self.board.replica_stats.remote()
            await asyncio.sleep(interval)

    def _loads(self) -> dict[str, TierLoad]:
        return {tier: TierLoad(tuple(replicas.values())) for tier, replicas in self._replica_stats.items()}

    # ---- helpers -------------------------------------------------------------------------------------------------

    def _tenant(self, request: Request) -> str:
        auth = request.headers.get("authorization", "")
        key = auth.removeprefix("Bearer ").strip() if auth.startswith("Bearer ") else ""
        for name, tenant in self.policy.tenants.items():
            expected = os.environ.get(tenant.api_key_env)
            if expected and key == expected:
                return name
        if key and self.policy.tenants:
            raise oa.APIError(401, "unknown API key: it belongs to no tenant of this service's policy", "authentication_error",
                              code="invalid_api_key")
        if self.policy.server.allow_anonymous:
            return "anonymous"
        raise oa.APIError(401, "missing API key: send 'Authorization: Bearer <key>'", "authentication_error",
                          code="invalid_api_key")

    def _admit(self, tenant: str) -> None:
        limit = self.policy.tenants[tenant].max_concurrent_requests if tenant in self.policy.tenants else None
        if limit is not None and self._in_flight.get(tenant, 0) >= limit:
            raise oa.APIError(429, f"tenant {tenant!r} has {limit} requests in flight, its limit; retry later",
                              "rate_limit_error", code="tenant_concurrency", headers={"Retry-After": "1"})
        self._in_flight[tenant] = self._in_flight.get(tenant, 0) + 1

    async def _body(self, request: Request) -> bytes:
        body = await request.body()
        if len(body) > self.policy.server.max_body_bytes:
            raise oa.APIError(413, f"request body is {len(body)} bytes; the limit is {self.policy.server.max_body_bytes}",
                              code="body_too_large")
        return body

    async def _decide(self, parsed: oa.OpenAIRequest, tenant: str) -> Decision:
        requested = self.policy.tier_for_model(parsed.model)
        if requested is None and parsed.model not in AUTO_MODELS:
            raise oa.APIError(404, f"model {parsed.model!r} does not exist; GET /v1/models lists the models",
                              param="model", code="model_not_found")
        routing = RoutingRequest(
            prompt=parsed.prompt_text(),
            model=parsed.model if requested else None,
            reasoning_effort=parsed.reasoning_effort,
            max_thinking_tokens=parsed.max_thinking_tokens,
            max_answer_tokens=parsed.answer_cap,
            tenant=tenant,
        )
        difficulty = None
        if self.classifier is not None and self.policy.routing.classifier.enabled:
            difficulty = await self.classifier.score.remote(routing.prompt)
        try:
            decision = decide(self.policy, routing, difficulty, self._loads())
        except Overloaded as shed:
            self.metrics.requests.labels("none", "shed").inc()
            raise oa.APIError(429, str(shed), "rate_limit_error", code="overloaded",
                              headers={"Retry-After": str(shed.retry_after_s)}) from None
        self.metrics.decisions.labels(decision.tier, decision.effort, decision.reason).inc()
        if decision.degraded:
            self.metrics.degraded.labels(decision.degraded.split(":")[0]).inc()
        return decision

    async def _serve(self, request: Request, kind: type[oa.OpenAIRequest]) -> Response:
        try:
            parsed = oa.parse_request(await self._body(request), kind)
            tenant = self._tenant(request)
            decision = await self._decide(parsed, tenant)
            self._admit(tenant)
        except oa.APIError as err:
            return JSONResponse(err.body, status_code=err.status, headers=err.headers)
        request_id = f"{'chatcmpl' if kind is oa.ChatCompletionRequest else 'cmpl'}-{uuid.uuid4().hex}"
        tier_request = TierRequest(
            request_id=request_id,
            thinking_tokens=decision.thinking_tokens,
            answer_tokens=decision.answer_tokens,
            priority=decision.priority,
            difficulty=decision.difficulty,
            messages=parsed.message_dicts() if isinstance(parsed, oa.ChatCompletionRequest) else None,
            prompt=parsed.prompt_text() if isinstance(parsed, oa.CompletionRequest) else None,
            max_prompt_tokens=self.policy.tiers[decision.tier].max_prompt_tokens,
            temperature=parsed.temperature,
            top_p=parsed.top_p,
            seed=parsed.seed,
            stop=parsed.stop_list,
        )
        tracker = _Request(self.metrics, decision)
        tier = self.tiers[decision.tier]
        model = self.policy.served_name(decision.tier)
        try:
            if parsed.stream:
                stream = tier.options(stream=True).generate.remote(tier_request)
                first: TierChunk = await stream.__anext__()
            else:
                dispatched = time.monotonic()
                first = await tier.generate_all.remote(tier_request)
        except Exception as exc:
            self._release(tenant)
            cause = _cause(exc)
            if isinstance(cause, PromptTooLong):
                self.metrics.requests.labels(decision.tier, "client_error").inc()
                err = oa.APIError(400, str(cause), param="messages", code="context_length_exceeded")
                return JSONResponse(err.body, status_code=400)
            self.metrics.requests.labels(decision.tier, "error").inc()
            raise
        headers = decision.headers() | {HEADER_PREFIX + "replica": first.replica or ""}
        if parsed.stream:
            body = self._sse(kind, request_id, model, first, stream, tracker, parsed.include_usage, tenant)
            return StreamingResponse(body, media_type="text/event-stream", headers=headers)
        self._release(tenant)
        tracker.finished_whole(first, dispatched)
        make = oa.chat_completion if kind is oa.ChatCompletionRequest else oa.text_completion
        return JSONResponse(make(request_id, model, first), headers=headers)

    def _release(self, tenant: str) -> None:
        self._in_flight[tenant] -= 1

    async def _chunks(self, first: TierChunk, stream: Any, tracker: _Request) -> AsyncIterator[TierChunk]:
        chunk = first
        while True:
            tracker.saw(chunk)
            yield chunk
            if chunk.finish_reason is not None:
                tracker.finished(chunk)
                return
            chunk = await stream.__anext__()

    async def _sse(
        self, kind: type[oa.OpenAIRequest], request_id: str, model: str, first: TierChunk, stream: Any,
        tracker: _Request, include_usage: bool, tenant: str,
    ) -> AsyncIterator[str]:
        chat = kind is oa.ChatCompletionRequest
        try:
            if chat:
                yield oa.sse(oa.chat_chunk(request_id, model, {"role": "assistant", "content": ""}))
            async for chunk in self._chunks(first, stream, tracker):
                if chat:
                    delta = oa.chat_delta(chunk)
                    if delta or chunk.finish_reason:
                        yield oa.sse(oa.chat_chunk(request_id, model, delta, chunk.finish_reason))
                else:
                    yield oa.sse(oa.text_chunk(request_id, model, chunk))
                if chunk.finish_reason is not None and include_usage:
                    final = oa.chat_chunk(request_id, model, {}) if chat else oa.text_chunk(request_id, model, TierChunk())
                    final["choices"] = []
                    final["usage"] = oa.usage(chunk)
                    yield oa.sse(final)
            yield oa.sse("[DONE]")
        except Exception:
            self.metrics.requests.labels(tracker.decision.tier, "error").inc()
            raise
        finally:
            self._release(tenant)

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
        stats = await self.board.replica_stats.remote()
        tiers = {tier: len(stats.get(tier, {})) for tier in self.policy.tiers}
        ready = all(tiers.values())
        return JSONResponse({"ready": ready, "replicas": tiers}, status_code=200 if ready else 503)

    @app.get("/metrics")
    async def metrics_text(self) -> PlainTextResponse:
        self._replica_stats = await self.board.replica_stats.remote()
        return PlainTextResponse(generate_latest(self.metrics.registry), media_type=CONTENT_TYPE_LATEST)
