"""A stream whose client goes away mid-answer is counted (outcome "abandoned") and its tier stream cancelled."""

from __future__ import annotations

import asyncio
import time

from prometheus_client import generate_latest

from thinktier.deployments.request import openai_api as oa
from thinktier.deployments.request.admission import Slot
from thinktier.deployments.request.decision import Decision
from thinktier.deployments.request.ingress import _Request, sse_body
from thinktier.deployments.request.metrics import ServiceMetrics
from thinktier.deployments.request.tier_call import Deadline
from thinktier.deployments.tier.protocol import TierChunk


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
    stream, counts = Stream(), {}

    async def client_leaves_after_two_events() -> None:
        body = sse_body(oa.SSEFramer(True, "chatcmpl-1", "m", False), TierChunk(reasoning="Let me see. "), stream,  # type: ignore[arg-type]
                        _Request(metrics, decision), Slot(counts, "acme"), Deadline(60, time.monotonic() + 600))
        await body.__anext__()
        await body.__anext__()
        await body.aclose()  # what Starlette does when the client disconnects

    asyncio.run(client_leaves_after_two_events())
    text = generate_latest(metrics.registry).decode()
    assert 'thinktier_requests_total{outcome="abandoned",tier="reasoning"} 1.0' in text
    assert 'outcome="error"' not in text and 'outcome="ok"' not in text
    assert stream.cancelled and counts == {"acme": 0}  # the engine request is aborted and the tenant's slot given back
