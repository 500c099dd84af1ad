"""One call from the Ingress to a tier: under deadlines, retried once when it fails before anything reached the client.

Kept apart from the Ingress deployment so that the retry and deadline rules are testable with fake handles.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar, cast

from ray.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator

from thinktier.deployments.request.openai_api import APIError
from thinktier.deployments.tier.protocol import EngineDead, PromptTooLong, TierChunk, TierRequest
from thinktier.policies.schema import Server

if TYPE_CHECKING:
    from thinktier.deployments.tier.tier import TierReplica

logger = logging.getLogger("ray.serve")
ATTEMPTS = 2
"""A tier call that fails before the client saw anything is tried once more (Serve routes the retry)."""
T = TypeVar("T")
TierStream = DeploymentResponseGenerator[TierChunk]


class TierFailed(Exception):
    """The tier failed the request on every attempt, before anything was sent to the client."""


def cause(exc: BaseException) -> BaseException:
    """The user exception inside a Ray error (Ray wraps exceptions raised in other replicas)."""
    return getattr(exc, "cause", None) or exc


CLIENT_TIMEOUT_HEADER = "x-request-timeout-seconds"
"""A client's own limit on its request, which Ray Serve enforces too: past it, Serve cancels the request and, if nothing
was sent yet, answers a plain-text 408. The Ingress ends the request a little earlier itself (`client_margin_s`), so the
client gets an OpenAI-shaped 408, or a stream its error event, instead."""


@dataclass(frozen=True)
class ClientLimit:
    """A request's own limit (its x-request-timeout-seconds, None without one), counted from when it arrived
    (time.monotonic())."""

    timeout_s: float | None
    arrived: float

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> ClientLimit:
        """From the request's headers, read as Serve reads them: a positive number of seconds; anything else is no
        limit here (Serve then keeps its own request timeout, or none for a value <= 0)."""
        header = headers.get(CLIENT_TIMEOUT_HEADER)
        try:
            seconds = float(header) if header is not None else 0.0
        except ValueError:
            seconds = 0.0
        return cls(seconds if 0 < seconds < float("inf") else None, time.monotonic())

    def end(self) -> float | None:
        """When the Ingress ends the request itself (time.monotonic()), `client_margin_s` before the client's limit."""
        return None if self.timeout_s is None else self.arrived + self.timeout_s - client_margin_s(self.timeout_s)


def client_margin_s(timeout_s: float) -> float:
    """How long before the client's limit the Ingress ends the request itself, so that its answer is out before Serve's
    own timer fires: a tenth of the limit, between 50 ms and 1 s."""
    return min(max(0.05, 0.1 * timeout_s), 1.0)


@dataclass(frozen=True)
class Deadline:
    """When a tier must answer: each chunk of a stream (the first too) within `idle_s`, the whole call by `end`
    (time.monotonic()). Non-streamed calls are one reply, bound by `end` alone."""

    idle_s: float
    end: float
    cold_start_s: float | None = None
    """For the first chunk instead of `idle_s`: the tier has no live replica and Serve is starting one."""
    client_timeout_s: float | None = None
    """Set when `end` is the client's own limit (its x-request-timeout-seconds), not the policy's."""

    @classmethod
    def of(cls, server: Server, cold_start: bool = False, client: ClientLimit | None = None) -> Deadline:
        """The policy's deadlines from now, or the client's own limit where that comes first."""
        end = time.monotonic() + server.tier_timeout_s
        cold = server.cold_start_timeout_s if cold_start else None
        client_end = client.end() if client is not None else None
        if client is not None and client_end is not None and client_end < end:
            return cls(server.tier_idle_timeout_s, client_end, cold, client.timeout_s)
        return cls(server.tier_idle_timeout_s, end, cold)

    def total_s(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def chunk_s(self) -> float:
        return min(self.idle_s, self.total_s())

    def first_chunk_s(self) -> float:
        return min(self.cold_start_s, self.total_s()) if self.cold_start_s is not None else self.chunk_s()

    def message(self) -> str:
        if self.client_timeout_s is not None:
            return (f"the request did not finish within its {CLIENT_TIMEOUT_HEADER}, {self.client_timeout_s:g} s; it "
                    "was aborted")
        first = "" if self.cold_start_s is None else (
            f"server.cold_start_timeout_s, {self.cold_start_s:g} s for a replica to start; ")
        return (f"the tier did not answer in time (policy: {first}server.tier_idle_timeout_s, {self.idle_s:g} s for a "
                "chunk; server.tier_timeout_s in all); the request was aborted")


async def _bounded(awaitable: Awaitable[T], timeout_s: float, cancel: Callable[[], object]) -> T:
    """`awaitable` within `timeout_s`; on a timeout or any other early exit (the client left) `cancel()` ends the
    Serve request, which aborts the engine request."""
    try:
        return await asyncio.wait_for(awaitable, timeout_s)
    except BaseException:
        cancel()
        raise


async def call_once(
    handle: DeploymentHandle[TierReplica], request: TierRequest, streaming: bool, deadline: Deadline
) -> tuple[TierChunk, TierStream | None]:
    """The first chunk and the rest of the stream (streaming), or the whole completion and None."""
    # Serve's `remote()` is typed as either response; `stream=True` and the method decide which one it is.
    if streaming:
        stream = cast(TierStream, handle.options(stream=True).generate.remote(request))
        return await _bounded(stream.__anext__(), deadline.first_chunk_s(), stream.cancel), stream
    response = cast(DeploymentResponse[TierChunk], handle.generate_all.remote(request))
    return await _bounded(response, deadline.total_s(), response.cancel), None


async def call_tier(
    handle: DeploymentHandle[TierReplica], tier: str, request: TierRequest, streaming: bool, deadline: Deadline,
    engine_died: Callable[[str], bool] = lambda replica: True,
) -> tuple[TierChunk, TierStream | None]:
    """`call_once`, tried again once when the tier fails; each attempt has its own engine request id (the engine keys
    requests and aborts by it). A prompt too long is the client's 400 and a deadline passed is a 504: neither is
    retried. A replica whose engine is dead is named to `engine_died`, which says whether the tier has another live
    replica to retry on: with none, a retry would wait in Serve's queue for the replica that replaces it. TierFailed when
    every attempt failed."""
    failures: list[Exception] = []
    for attempt in range(1, ATTEMPTS + 1):
        attempt_request = replace(request, request_id=f"{request.request_id}.{uuid.uuid4().hex[:12]}")
        try:
            return await call_once(handle, attempt_request, streaming, deadline)
        except TimeoutError:
            if deadline.client_timeout_s is not None:
                raise APIError(408, deadline.message(), code="request_timeout") from None
            raise APIError(504, f"tier {tier!r}: {deadline.message()}", "server_error", code="timeout") from None
        except Exception as exc:
            if isinstance(cause(exc), PromptTooLong):
                raise APIError(400, str(cause(exc)), param="messages", code="context_length_exceeded") from None
            logger.warning("request %s: tier %s failed (attempt %d of %d): %s", request.request_id, tier, attempt,
                           ATTEMPTS, cause(exc))
            failures.append(exc)
            dead = cause(exc)
            if isinstance(dead, EngineDead) and not engine_died(dead.replica):
                raise TierFailed(f"tier {tier!r} has no live replica: {dead}") from exc
    raise TierFailed(f"tier {tier!r} failed the request {ATTEMPTS} times: {cause(failures[-1])}") from failures[-1]
