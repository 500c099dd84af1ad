"""A client's own `x-request-timeout-seconds` on real Ray Serve. Serve enforces the header itself, answering a plain-text
408 (or cutting a stream); the Ingress ends the request a little earlier, in the API's shape. The real Ingress stands in
front of synthetic tiers (loadtest/bench/frontdoor/synthetic_tier.py: tokens at a set rate, no model), so a reply takes
a known time: 60 s here, against a 2 s limit."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx
import pytest

from tests.live import synthetic_app

pytestmark = pytest.mark.integration
APP = "client-timeout"
EDITS = {
    "routing": {"classifier": {"enabled": False}},
    "tiers": {"chat": {"budgets": {"high": {"thinking_tokens": 0, "answer_tokens": 600}}}},  # 60 s at 10 tokens/s
}
BODY = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "high"}
LIMIT = {"x-request-timeout-seconds": "2"}


def test_a_request_past_its_own_timeout_header_gets_an_openai_shaped_408_or_a_stream_error_event(
    serve_port: int, tmp_path: Path
) -> None:
    with synthetic_app(serve_port, tmp_path, APP, EDITS, tokens_per_s=10) as url:
        started = time.monotonic()
        whole = httpx.post(f"{url}/v1/chat/completions", json=BODY, headers=LIMIT, timeout=30)
        took_s = time.monotonic() - started
        assert whole.status_code == 408, whole.text
        error = whole.json()["error"]
        assert error["code"] == "request_timeout" and "x-request-timeout-seconds, 2 s" in error["message"]
        assert 1.5 < took_s < 2.0

        with httpx.stream("POST", f"{url}/v1/chat/completions", json=BODY | {"stream": True}, headers=LIMIT,
                          timeout=30) as response:
            assert response.status_code == 200
            events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
        assert events[-1] == "[DONE]" and len(events) > 3, "the stream ran until its limit, then ended"
        assert json.loads(events[-2])["error"]["code"] == "request_timeout"

        short = httpx.post(f"{url}/v1/chat/completions", json=BODY | {"max_tokens": 5}, headers=LIMIT, timeout=30)
        assert short.status_code == 200, "a request that fits its limit is served"
