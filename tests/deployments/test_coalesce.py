"""Stream coalescing: fewer, larger chunks; the first token, the first answer token and the end at once. And the
heartbeats of a request queued in a busy engine (deployments/tier/queued.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from thinktier.deployments.tier.coalesce import coalesce
from thinktier.deployments.tier.protocol import TierChunk
from thinktier.deployments.tier.queued import while_queued


async def timed(items: list[tuple[float, TierChunk]], log: list[str] | None = None) -> AsyncIterator[TierChunk]:
    try:
        for delay, chunk in items:
            await asyncio.sleep(delay)
            yield chunk
    finally:
        if log is not None:
            log.append("closed")


def steps(n: int, gap_s: float, kind: str = "reasoning") -> list[tuple[float, TierChunk]]:
    return [(gap_s, TierChunk(**{kind: f"{kind[0]}{i} "})) for i in range(n)]


async def run(source: AsyncIterator[TierChunk], interval_s: float) -> list[tuple[float, TierChunk]]:
    loop = asyncio.get_running_loop()
    start = loop.time()
    return [(loop.time() - start, chunk) async for chunk in coalesce(source, interval_s)]


def test_tokens_arrive_in_batches_with_the_text_unchanged() -> None:
    items = [*steps(40, 0.005), (0.005, TierChunk(content="end", finish_reason="stop", reasoning_tokens=40))]
    out = asyncio.run(run(timed(items), interval_s=0.05))
    joined = TierChunk.joined([c for _, c in out])
    assert joined.reasoning == "".join(c.reasoning for _, c in items)
    assert joined.content == "end" and joined.finish_reason == "stop" and joined.reasoning_tokens == 40
    assert len(out) <= 10, f"41 engine steps over ~0.2 s in 50 ms batches, got {len(out)} messages"


def test_first_token_first_answer_token_and_end_leave_at_once() -> None:
    items = [(0.0, TierChunk(reasoning="r0")), *steps(3, 0.002)]
    items += [(0.002, TierChunk(content="a0")), (0.3, TierChunk(content="a1", finish_reason="stop"))]
    out = asyncio.run(run(timed(items), interval_s=10.0))
    assert out[0][1].reasoning == "r0" and out[0][0] < 0.05, "the first chunk does not wait for a batch"
    visible = next((t, c) for t, c in out if c.content)
    assert "a0" in visible[1].content and visible[0] < 0.1, "the first answer token does not wait for the interval"
    assert out[-1][1].finish_reason == "stop" and out[-1][0] < 1.0, "the end does not wait for the interval"


def test_a_quiet_engine_does_not_hold_a_batch_past_the_interval() -> None:
    items = [(0.0, TierChunk(reasoning="r0")), (0.01, TierChunk(reasoning="r1")), (0.5, TierChunk(reasoning="r2"))]
    items.append((0.0, TierChunk(finish_reason="stop")))
    out = asyncio.run(run(timed(items), interval_s=0.05))
    second = next(t for t, c in out if "r1" in c.reasoning)
    assert second < 0.2, f"r1 left at {second:.3f} s, held until the next token"


def test_closing_the_stream_closes_the_engine_stream() -> None:
    log: list[str] = []

    async def take_one() -> None:
        stream = coalesce(timed(steps(100, 0.01), log), interval_s=0.05)
        async for _ in stream:
            break
        await stream.aclose()

    asyncio.run(take_one())
    assert log == ["closed"]


def test_an_engine_error_reaches_the_consumer_after_what_came_before() -> None:
    async def failing() -> AsyncIterator[TierChunk]:
        yield TierChunk(reasoning="r0")
        raise RuntimeError("engine died")

    async def consume() -> list[TierChunk]:
        return [c async for c in coalesce(failing(), interval_s=0.05)]

    with pytest.raises(RuntimeError, match="engine died"):
        asyncio.run(consume())


def test_interval_zero_passes_every_step_through() -> None:
    out = asyncio.run(run(timed(steps(5, 0.0)), interval_s=0))
    assert len(out) == 5


def test_a_request_queued_in_a_busy_engine_sends_heartbeats_until_its_first_chunk_then_its_chunks() -> None:
    async def go() -> list[TierChunk]:
        source = timed([(0.25, TierChunk(reasoning="r0 ")), (0.01, TierChunk(content="42", finish_reason="stop"))])
        return [chunk async for chunk in while_queued(source, lambda: True, 0.05)]

    chunks = asyncio.run(go())
    heartbeats = [c for c in chunks if not (c.reasoning or c.content)]
    assert 3 <= len(heartbeats) <= 5 and chunks[:len(heartbeats)] == heartbeats  # only before the first chunk
    assert [(c.reasoning, c.content) for c in chunks[len(heartbeats):]] == [("r0 ", ""), ("", "42")]


def test_an_engine_that_produces_nothing_sends_no_heartbeat_so_a_stuck_one_is_still_caught() -> None:
    async def go() -> list[TierChunk]:
        return [chunk async for chunk in while_queued(timed([(0.2, TierChunk(content="late"))]), lambda: False, 0.05)]

    assert [c.content for c in asyncio.run(go())] == ["late"]


def test_closing_a_queued_stream_closes_its_source() -> None:
    log: list[str] = []

    async def go() -> None:
        stream = while_queued(timed([(10, TierChunk(content="never"))], log), lambda: True, 0.01)
        assert not (await anext(stream)).content  # a heartbeat
        await stream.aclose()  # type: ignore[attr-defined]

    asyncio.run(go())
    assert log == ["closed"]
