"""A model-free token source for the front-door benchmark: TierChunks at a set rate per stream.

Each stream gets one token per engine step. Steps fall on a grid of multiples of 1/rate of the
monotonic clock, the same for every stream of the process, so, as in a batching engine, all
running streams step together (and an overloaded process steps later, never in catch-up bursts).
Reasoning and answer are split, counted and totalled by the engine's own ReasoningSplitter, and
the stream leaves through the tier replica's real `coalesce`. No Ray here: the bare-FastAPI floor
of the benchmark serves the same stream.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator, Sequence

from thinktier.deployments.tier.coalesce import coalesce
from thinktier.deployments.tier.protocol import TierChunk, TierRequest
from thinktier.deployments.tier.thinking import ReasoningSplitter

WORD = "tok "
"""The text of one synthetic token; a client counts the tokens of a delta as the occurrences of it."""
END_ID, WORD_ID = 0, 1
"""Token ids of the synthetic vocabulary: the end of the thinking section, and WORD."""


def tokens_in(text: str) -> int:
    """Synthetic tokens in a piece of streamed text."""
    return text.count(WORD)


def _decode(ids: Sequence[int]) -> str:
    return WORD * ids.count(WORD_ID)


def prompt_tokens(request: TierRequest) -> int:
    """A stand-in for the prompt's token count: its words."""
    texts = [m["content"] for m in request.messages or ()] + [request.prompt or ""]
    return sum(len(text.split()) for text in texts)


async def synthetic_chunks(request: TierRequest, tokens_per_s: float) -> AsyncIterator[TierChunk]:
    """`request.thinking_tokens` reasoning tokens, then `request.answer_tokens` answer tokens, one chunk per step
    at `tokens_per_s`; the end of thinking rides on the first answer step, as the engine writes it. Then the totals."""
    start = time.monotonic()
    thinking, total = request.thinking_tokens, request.thinking_tokens + request.answer_tokens
    split = ReasoningSplitter(thinking > 0, END_ID, thinking, request.answer_tokens)
    step = math.floor(start * tokens_per_s)
    for i in range(total):
        step = max(step + 1, math.floor(time.monotonic() * tokens_per_s) + 1)
        await asyncio.sleep(step / tokens_per_s - time.monotonic())
        ids = [END_ID, WORD_ID] if thinking > 0 and i == thinking else [WORD_ID]
        yield split.feed(ids, WORD, _decode, time.monotonic() - start, i == total - 1, "stop")
    yield split.totals(prompt_tokens(request))


async def tier_stream(
    request: TierRequest, tokens_per_s: float, interval_s: float, replica: str | None = None
) -> AsyncIterator[TierChunk]:
    """What a tier replica streams for `request`: the synthetic chunks coalesced at `interval_s`, the first one
    naming `replica`."""
    first = True
    async for chunk in coalesce(synthetic_chunks(request, tokens_per_s), interval_s):
        if first:
            chunk.replica, first = replica, False
        yield chunk
