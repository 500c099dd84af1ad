"""A stream that fails after its 200 ends with an OpenAI error event and [DONE], gives its tenant slot back and aborts
the tier request; a stream that ends normally ends with [DONE] alone."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from thinktier.deployments.request import openai_api as oa
from thinktier.deployments.request.admission import Admission
from thinktier.deployments.request.ingress import sse_body
from thinktier.deployments.request.tier_call import Deadline
from thinktier.deployments.tier.protocol import TierChunk
from thinktier.policies.loader import load_policy

POLICY = load_policy()


class TierStream:
    def __init__(self, chunks: list[TierChunk | Exception]) -> None:
        self.chunks = chunks
        self.cancelled = False

    async def __anext__(self) -> TierChunk:
        if not self.chunks:  # a stuck engine: nothing more, ever
            await asyncio.sleep(3600)
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


def events(
    rest: list[TierChunk | Exception], idle_s: float = 60, total_s: float = 600
) -> tuple[list[str], TierStream, Tracker, dict[str, int]]:
    admission = Admission()
    stream, tracker = TierStream(rest), Tracker()
    framer = oa.SSEFramer(chat=True, request_id="chatcmpl-1", model="m", include_usage=False)

    async def collect() -> list[str]:
        deadline = Deadline(idle_s, time.monotonic() + total_s)
        slot = await admission.slot(POLICY, "anonymous")
        body = sse_body(framer, TierChunk(reasoning="Let me think"), stream, tracker, slot, deadline)  # type: ignore[arg-type]
        return [event async for event in body]

    return asyncio.run(collect()), stream, tracker, admission.in_flight(POLICY)


def test_a_tier_failure_mid_stream_ends_with_an_error_event_and_done() -> None:
    sent, stream, tracker, counts = events([TierChunk(content="The answer"), RuntimeError("engine died")])
    assert sent[-1] == oa.SSE_DONE
    error = json.loads(sent[-2].removeprefix("data: "))["error"]
    assert (error["type"], error["code"]) == ("server_error", "stream_failed")
    assert stream.cancelled and tracker.outcome == "error" and counts == {"anonymous": 0}


def test_a_tier_stream_that_stops_without_a_finish_reason_is_a_failure_too() -> None:
    sent, stream, tracker, _ = events([StopAsyncIteration()])
    assert "stream_failed" in sent[-2] and stream.cancelled and tracker.outcome == "error"


def test_a_stream_that_finishes_ends_with_done_alone() -> None:
    sent, stream, tracker, counts = events([TierChunk(content="42", finish_reason="stop", answer_tokens=1)])
    assert sent[-1] == oa.SSE_DONE and not any("error" in e for e in sent)
    assert not stream.cancelled and tracker.outcome == "ok" and counts == {"anonymous": 0}


def test_a_stuck_tier_ends_the_stream_at_its_idle_deadline_with_a_timeout_event() -> None:
    start = time.monotonic()
    sent, stream, tracker, counts = events([TierChunk(content="The ans")], idle_s=0.2)
    assert time.monotonic() - start < 5
    assert sent[-1] == oa.SSE_DONE
    error = json.loads(sent[-2].removeprefix("data: "))["error"]
    assert error["code"] == "timeout" and "server.tier_idle_timeout_s" in error["message"]
    assert stream.cancelled and tracker.outcome == "error" and counts == {"anonymous": 0}


def test_a_stream_ends_at_its_total_deadline_even_while_chunks_keep_coming() -> None:
    class Endless(TierStream):
        async def __anext__(self) -> TierChunk:
            await asyncio.sleep(0.05)
            return TierChunk(content="more ")

    admission = Admission()
    stream, tracker = Endless([]), Tracker()
    framer = oa.SSEFramer(chat=True, request_id="chatcmpl-2", model="m", include_usage=False)

    async def collect() -> list[str]:
        deadline = Deadline(idle_s=10, end=time.monotonic() + 0.5)
        slot = await admission.slot(POLICY, "anonymous")
        body = sse_body(framer, TierChunk(content="go "), stream, tracker, slot, deadline)  # type: ignore[arg-type]
        return [event async for event in body]

    sent = asyncio.run(collect())
    assert '"code": "timeout"' in sent[-2] and sent[-1] == oa.SSE_DONE
    assert stream.cancelled and admission.in_flight(POLICY) == {"anonymous": 0}


def test_a_tier_starting_its_first_replica_gets_the_cold_start_wait_for_its_first_chunk_only() -> None:
    server = POLICY.server.model_copy(update={"tier_idle_timeout_s": 5, "cold_start_timeout_s": 200})
    warm, cold = Deadline.of(server), Deadline.of(server, cold_start=True)
    assert warm.first_chunk_s() == pytest.approx(5, abs=0.1)
    assert cold.first_chunk_s() == pytest.approx(200, abs=0.1) and cold.chunk_s() == pytest.approx(5, abs=0.1)
    assert "server.cold_start_timeout_s, 200 s" in cold.message() and "cold_start" not in warm.message()
