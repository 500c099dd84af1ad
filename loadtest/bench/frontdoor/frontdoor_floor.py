"""The floor of the front-door benchmark: one bare FastAPI process (uvicorn) that serves the synthetic stream itself.

The same tokens at the same rate, coalesced at the same interval and framed by the same SSEFramer as
thinktier's Ingress frames a tier's stream, with no proxy, no Ingress replica and no tier hop: what serving
these streams costs at the least. Budgets come from the request (`max_thinking_tokens`, `max_tokens`).

Started by loadtest/bench/frontdoor/frontdoor_bench.py as
`python -m thinktier.loadtest.bench.frontdoor.frontdoor_floor --port P --tokens-per-s R --interval-ms I --workers W`.
"""

from __future__ import annotations

import argparse
import os
import uuid
from collections.abc import AsyncIterator

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from thinktier.deployments.request import openai_api as oa
from thinktier.deployments.tier.protocol import TierChunk, TierRequest
from thinktier.loadtest.bench.frontdoor.synthetic_stream import tier_stream

DEFAULT_ANSWER_TOKENS = 256
"""Answer tokens of a request that sets no `max_tokens`."""
ENV_TOKENS_PER_S, ENV_INTERVAL_MS = "THINKTIER_FLOOR_TOKENS_PER_S", "THINKTIER_FLOOR_INTERVAL_MS"


async def sse(framer: oa.SSEFramer, chunks: AsyncIterator[TierChunk]) -> AsyncIterator[str]:
    """One SSE message per chunk, the stream's opening with the first, as the Ingress sends them."""
    opening = framer.start()
    async for chunk in chunks:
        yield opening + framer.events(chunk)
        opening = ""
    yield oa.SSE_DONE


def create_app(tokens_per_s: float, interval_s: float) -> FastAPI:
    app = FastAPI(title="thinktier front-door floor")

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        try:
            parsed = oa.parse_request(await request.body(), oa.ChatCompletionRequest)
        except oa.APIError as err:
            return JSONResponse(err.body, status_code=err.status)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        tier_request = TierRequest(
            request_id=request_id,
            thinking_tokens=parsed.max_thinking_tokens or 0,
            answer_tokens=parsed.answer_cap or DEFAULT_ANSWER_TOKENS,
            messages=parsed.message_dicts(),
        )
        framer = oa.SSEFramer(True, request_id, parsed.model, parsed.include_usage)
        body = sse(framer, tier_stream(tier_request, tokens_per_s, interval_s))
        return StreamingResponse(body, media_type="text/event-stream")

    @app.get("/readyz")
    async def readyz() -> dict[str, bool]:
        return {"ready": True}

    return app


def app_from_env() -> FastAPI:
    """`create_app` with the settings `main` leaves in the environment, where uvicorn's worker processes find them."""
    return create_app(float(os.environ[ENV_TOKENS_PER_S]), float(os.environ[ENV_INTERVAL_MS]) / 1000)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens-per-s", type=float, required=True, help="tokens per second of each stream")
    parser.add_argument("--interval-ms", type=float, required=True, help="coalescing interval (0: every step alone)")
    parser.add_argument("--workers", type=int, default=1, help="uvicorn worker processes (1: this process serves)")
    args = parser.parse_args()
    os.environ |= {ENV_TOKENS_PER_S: str(args.tokens_per_s), ENV_INTERVAL_MS: str(args.interval_ms)}
    uvicorn.run("thinktier.loadtest.bench.frontdoor.frontdoor_floor:app_from_env", factory=True, host="127.0.0.1",
                port=args.port, workers=args.workers, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
