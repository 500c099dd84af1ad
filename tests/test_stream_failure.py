"""A stream that fails after its 200 ends with an OpenAI error event and [DONE], gives its tenant slot back and aborts
the tier request; a stream that ends normally ends with [DONE] alone."""

from __future__ import annotations

import asyncio
import json

from deployments import openai_api as oa
from deployments.admission import Slot
from deployments.ingress import sse_body
from deployments.protocol import TierChunk


class TierStream:
    def __init__(self, chunks: list[TierChunk | Exception]) -> None:
        self.chunks = chunks
        self.cancelled = False

    async def __anext__(self) -> TierChunk:
        item = self.chunks.pop(0)
        if isinstance(item, Exception):
            raise item
        return item

    def cancel(self) -> None:
        self.cancelled = True


class Tracker:
    def __init__(self) -> None:
        self.outcome: str | None = None

    def saw(self, chunk: TierChunk) -> None:
        pass

    def finished(self, last: TierChunk) -> None:
        self.outcome = "ok"

    def failed(self) -> None:
        self.outcome = "error"


def events(rest: list[TierChunk | Exception]) -> tuple[list[str], TierStream, Tracker, dict[str, int]]:
    counts: dict[str, int] = {}
    stream, tracker = TierStream(rest), Tracker()
    framer = oa.SSEFramer(chat=True, request_id="chatcmpl-1", model="m", include_usage=False)

    async def collect() -> list[str]:
        body = sse_body(framer, TierChunk(reasoning="Let me think"), stream, tracker, Slot(counts, "acme"))  # type: ignore[arg-type]
        return [event async for event in body]

    return asyncio.run(collect()), stream, tracker, counts


def test_a_tier_failure_mid_stream_ends_with_an_error_event_and_done() -> None:
    sent, stream, tracker, counts = events([TierChunk(content="The answer"), RuntimeError("engine died")])
    assert sent[-1] == oa.SSE_DONE
    error = json.loads(sent[-2].removeprefix("data: "))["error"]
    assert (error["type"], error["code"]) == ("server_error", "stream_failed")
    assert stream.cancelled and tracker.outcome == "error" and counts == {"acme": 0}


def test_a_tier_stream_that_stops_without_a_finish_reason_is_a_failure_too() -> None:
    sent, stream, tracker, _ = events([StopAsyncIteration()])
    assert "stream_failed" in sent[-2] and stream.cancelled and tracker.outcome == "error"


def test_a_stream_that_finishes_ends_with_done_alone() -> None:
    sent, stream, tracker, counts = events([TierChunk(content="42", finish_reason="stop", answer_tokens=1)])
    assert sent[-1] == oa.SSE_DONE and not any("error" in e for e in sent)
    assert not stream.cancelled and tracker.outcome == "ok" and counts == {"acme": 0}
