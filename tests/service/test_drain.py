"""Graceful shutdown on real Ray Serve: a stream in flight when the application stops finishes within
server.drain_timeout_s, and one that would run past it ends with an SSE error event and [DONE], not a cut connection.

The real Ingress and LoadBoard in front of synthetic tiers (loadtest/bench/frontdoor/synthetic_tier.py: tokens at a set rate, no
model), deployed with the policy's deployment options into the session's Serve, and stopped the way
`LocalCluster.stop` stops thinktier: by deleting the application."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.hardening_results import Recorder
from tests.live import synthetic_app

pytestmark = pytest.mark.integration
APP = "drain"
TOKENS_PER_S = 10
DRAIN_S = 4
SHORT_TOKENS = 25
"""A stream that ends within the drain: 2.5 s of tokens."""
EDITS = {
    "server": {"drain_timeout_s": DRAIN_S},
    "routing": {"classifier": {"enabled": False}},
    "tiers": {"chat": {"budgets": {"high": {"thinking_tokens": 0, "answer_tokens": 600}}}},  # 60 s: past the drain
}


class Stream(threading.Thread):
    """One streamed request, read to its end on its own thread: each data event with the time it arrived."""

    def __init__(self, url: str, body: dict[str, object]) -> None:
        super().__init__(daemon=True)
        self.url, self.body = url, body
        self.events: list[tuple[float, str]] = []
        self.started = threading.Event()

    def run(self) -> None:
        with httpx.stream("POST", f"{self.url}/v1/chat/completions", json=self.body, timeout=120) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    self.events.append((time.monotonic(), line.removeprefix("data: ")))
                    self.started.set()

    def after(self, t: float) -> list[str]:
        return [event for at, event in self.events if at > t]


def test_streams_in_flight_when_the_service_stops_finish_or_end_with_an_error_event_at_the_drain_deadline(
    serve_port: int, tmp_path: Path, record: Recorder
) -> None:
    from ray import serve

    with synthetic_app(serve_port, tmp_path, APP, EDITS, TOKENS_PER_S) as url:
        short = Stream(url, {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                             "max_tokens": SHORT_TOKENS})
        long = Stream(url, {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "stream": True,
                            "reasoning_effort": "high"})
        for stream in (short, long):
            stream.start()
            assert stream.started.wait(60), "no stream event"
        stopping = time.monotonic()
        serve.delete(APP)  # what LocalCluster.stop does first; returns once every replica has stopped
        stopped_s = time.monotonic() - stopping
    short.join(30)
    long.join(30)

    assert short.events[-1][1] == "[DONE]" and short.after(stopping), "the short stream was in flight at the stop"
    assert not any('"error"' in event for _, event in short.events)
    last = json.loads(short.events[-2][1])
    assert last["choices"][0]["finish_reason"] is not None  # it ran to its end

    assert [event for _, event in long.events[-1:]] == ["[DONE]"]
    error = json.loads(long.events[-2][1])["error"]
    assert error["type"] == "server_error"
    assert len(long.after(stopping)) > 2, "the long stream went on streaming during the drain"
    assert long.events[-2][0] > short.events[-1][0], "it was cut after the short one finished"
    cut_s = long.events[-2][0] - stopping
    print(f"stopped in {stopped_s:.1f} s; the long stream was cut {cut_s:.1f} s after the stop (drain {DRAIN_S} s)")
    record("fault", f"service stopped with two streams in flight (server.drain_timeout_s: {DRAIN_S})", 2,
           {"stream finished during the drain": 1, f"stream cut by an SSE error event {cut_s:.1f} s after the stop": 1},
           recover_s=stopped_s, recovered_when="the application stopped (every replica drained or past its deadline)")
