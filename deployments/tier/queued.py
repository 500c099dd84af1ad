"""A request queued behind others in a busy engine is let wait, not failed: until its first chunk, the tier replica
sends an empty chunk every `every_s` while its engine keeps producing output for other requests.

The Ingress gives a tier `server.tier_idle_timeout_s` for each chunk, the first too, so that a stuck engine does not
hold requests; without this, a request admitted into a long engine queue passed that deadline and got a 504 after
being accepted. An engine that produces nothing (stuck, or dead) sends no heartbeat, so it is still caught. The
Ingress passes the heartbeats on as SSE keep-alive comments.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from thinktier.deployments.tier.protocol import TierChunk


async def while_queued(
    chunks: AsyncIterator[TierChunk], engine_busy: Callable[[], bool], every_s: float
) -> AsyncIterator[TierChunk]:
    """`chunks`, with an empty chunk every `every_s` before the first one while `engine_busy()` says the engine is
    producing output for other requests. Closing this iterator closes `chunks` (the engine request is aborted there)."""
    source = aiter(chunks)
    first: asyncio.Task[TierChunk] = asyncio.ensure_future(anext(source))
    try:
        while True:
            done, _ = await asyncio.wait({first}, timeout=every_s)
            if done:
                break
            if engine_busy():
                yield TierChunk()
        try:
            yield first.result()
        except StopAsyncIteration:
            return
        async for chunk in source:
            yield chunk
    finally:
        if not first.done():
            first.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                await first
        with contextlib.suppress(Exception):
            await source.aclose()  # type: ignore[attr-defined]
