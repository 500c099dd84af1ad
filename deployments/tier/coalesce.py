"""Coalescing a stream of TierChunks into fewer, larger ones on its way out of a tier replica.

An engine emits one delta per decode step for every stream; at GPU rates that is tens of
thousands of messages a second, each costing a Ray object, an Ingress wake-up, an SSE event and
a proxy write. Sending each stream's deltas in batches at most `interval_s` apart cuts that cost
by the batch size, while the first chunk and the first answer chunk (TTFT and TTFVT) and the last
one go at once. The same idea as Ray Serve LLM's stream batching interval.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from thinktier.deployments.tier.protocol import TierChunk


async def coalesce(chunks: AsyncIterator[TierChunk], interval_s: float) -> AsyncIterator[TierChunk]:
    """`chunks` joined into batches: a batch opens with the first chunk that arrives after the last one went, and
    leaves `interval_s` later, or at once when it holds the stream's first chunk, first answer text or end.

    The source is read by a task of its own so a batch leaves on time even while the engine is quiet; closing
    this iterator cancels that task, which closes the source (the engine request is aborted there)."""
    if interval_s <= 0:
        async for chunk in chunks:
            yield chunk
        return
    loop = asyncio.get_running_loop()
    batch: list[TierChunk] = []
    ready = asyncio.Event()  # a batch holds something that must go now, or the source ended
    opened = asyncio.Event()  # a batch has its first chunk
    ended: list[BaseException | None] = []  # [None] at the source's end, [error] when it failed

    async def read() -> None:
        seen_first = seen_visible = False
        try:
            async for chunk in chunks:
                batch.append(chunk)
                opened.set()
                urgent = not seen_first or (chunk.content and not seen_visible) or chunk.finish_reason is not None
                seen_first, seen_visible = True, seen_visible or bool(chunk.content)
                if urgent:
                    ready.set()
            ended.append(None)
        except Exception as exc:  # handed to the consumer, raised there
            ended.append(exc)
        ready.set()
        opened.set()

    reader = loop.create_task(read())
    try:
        while True:
            await opened.wait()
            if not ready.is_set():
                timer = loop.call_later(interval_s, ready.set)
                await ready.wait()
                timer.cancel()
            opened.clear()
            ready.clear()
            if batch:
                out = TierChunk.joined(batch) if len(batch) > 1 else batch[0]
                batch.clear()
                yield out
            if ended:
                if ended[0] is not None:
                    raise ended[0]
                return
    finally:
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
