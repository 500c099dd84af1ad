"""One call from the Ingress to a tier: under deadlines, retried once when it fails before anything reached the client.

Kept apart from the Ingress deployment so that the retry and deadline rules are testable with fake handles.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, TypeVar, cast

from ray.serve.handle import DeploymentHandle, DeploymentResponse, DeploymentResponseGenerator

from thinktier.deployments.request.openai_api import APIError
from thinktier.deployments.tier.protocol import PromptTooLong, TierChunk, TierRequest
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


@dataclass(frozen=True)
class Deadline:
    """When a tier must answer: each chunk of a stream (the first too) within `idle_s`, the whole call by `end`
    (time.monotonic()). Non-streamed calls are one reply, bound by `end` alone."""

    idle_s: float
    end: float
    cold_start_s: float | None = None
    """For the first chunk instead of `idle_s`: the tier has no live replica and Serve is starting one."""

    @classmethod
    def of(cls, server: Server, cold_start: bool = False) -> Deadline:
        return cls(server.tier_idle_timeout_s, time.monotonic() + server.tier_timeout_s,
                   server.cold_start_timeout_s if cold_start else None)

    def total_s(self) -> float:
        return max(0.0, self.end - time.monotonic())

    def chunk_s(self) -> float:
        return min(self.idle_s, self.total_s())

    def first_chunk_s(self) -> float:
        return min(self.cold_start_s, self.total_s()) if self.cold_start_s is not None else self.chunk_s()

    def message(self) -> str:
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
    handle: DeploymentHandle[TierReplica], tier: str, request: TierRequest, streaming: bool, deadline: Deadline
) -> tuple[TierChunk, TierStream | None]:
    """`call_once`, tried again once when the tier fails; each attempt has its own engine request id (the engine keys
    requests and aborts by it). A prompt too long is the client's 400 and a deadline passed is a 504: neither is
    retried. TierFailed when every attempt failed."""
    failures: list[Exception] = []
    for attempt in range(1, ATTEMPTS + 1):
        attempt_request = replace(request, request_id=f"{request.request_id}.{uuid.uuid4().hex[:12]}")
        try:
            return await call_once(handle, attempt_request, streaming, deadline)
        except TimeoutError:
            raise APIError(504, f"tier {tier!r}: {deadline.message()}", "server_error", code="timeout") from None
        except Exception as exc:
            if isinstance(cause(exc), PromptTooLong):
                raise APIError(400, str(cause(exc)), param="messages", code="context_length_exceeded") from None
            logger.warning("request %s: tier %s failed (attempt %d of %d): %s", request.request_id, tier, attempt,
                           ATTEMPTS, cause(exc))
            failures.append(exc)
    raise TierFailed(f"tier {tier!r} failed the request {ATTEMPTS} times: {cause(failures[-1])}") from failures[-1]
