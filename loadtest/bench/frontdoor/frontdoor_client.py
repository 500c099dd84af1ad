"""The load of the front-door benchmark: streaming chat completions kept in flight (closed loop), each SSE
event timed, in processes of their own so that the client's CPU is not counted as the server's.

Lean on purpose, so that the client is not what limits the rate: raw asyncio streams on uvloop, HTTP/1.1
keep-alive with the chunked body decoded by hand, one `json.loads` per event. Tokens of an event are counted
in its text (loadtest/bench/frontdoor/synthetic_stream.py's WORD per token). Times are `time.monotonic()`, one clock for
every process of the machine: the bench hands out the measurement window as absolute times and samples the
servers' CPU over the very same window. Only what happens inside the window counts.

Run by loadtest/bench/frontdoor/frontdoor_bench.py as
`python -m thinktier.loadtest.bench.frontdoor.frontdoor_client LOAD_JSON`; prints a ClientSample as one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import uvloop

from thinktier.loadtest.bench.frontdoor.synthetic_stream import tokens_in

ERROR_PAUSE_S = 0.1
"""A stream slot waits this long after a failed request, so that a failing server is not hammered."""


class Failed(Exception):
    """The server answered, but not with a stream of completion events."""


@dataclass(frozen=True)
class Load:
    """What one client process sends, and when. Streams are numbered 0..streams-1 across all `procs`
    processes; process `index` runs every `procs`-th one, stream g starting at start_at + g * ramp_s / streams,
    so the streams' phases are spread over one request's length."""

    host: str
    port: int
    body: dict[str, Any]
    streams: int
    procs: int
    index: int
    start_at: float
    ramp_s: float
    window_start: float
    window_end: float

    def in_window(self, t: float) -> bool:
        return self.window_start <= t < self.window_end

    def request(self) -> bytes:
        payload = json.dumps(self.body).encode()
        head = (
            f"POST /v1/chat/completions HTTP/1.1\r\nHost: {self.host}:{self.port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(payload)}\r\n\r\n"
        )
        return head.encode() + payload


def chat_body(thinking_tokens: int, answer_tokens: int) -> dict[str, Any]:
    """A streaming request thinktier routes to its reasoning tier with these budgets (the floor reads them too)."""
    return {
        "model": "thinktier",
        "messages": [{"role": "user", "content": "Count for me."}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "reasoning_effort": "high",
        "max_thinking_tokens": thinking_tokens,
        "max_tokens": answer_tokens,
    }


@dataclass
class ClientSample:
    """What client processes measured inside the window."""

    tokens: int = 0
    """Tokens of the events that arrived in the window."""
    events: int = 0
    """Events with text that arrived in the window."""
    requests_started: int = 0
    requests_completed: int = 0
    errors: int = 0
    first_error: str | None = None
    usage_mismatches: int = 0
    """Completed requests whose usage.completion_tokens differs from the tokens they streamed."""
    ttft_s: list[float] = field(default_factory=list)
    """Request sent to its first event with text, for requests sent in the window."""
    gaps_s: list[float] = field(default_factory=list)
    """Between consecutive text events of a request, the later one in the window."""
    gap_tokens: list[int] = field(default_factory=list)
    """Tokens of that later event."""

    def failed(self, exc: BaseException) -> None:
        self.errors += 1
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"

    @classmethod
    def merged(cls, samples: list[ClientSample]) -> ClientSample:
        whole = cls()
        for sample in samples:
            for f in fields(cls):
                if f.name == "first_error":
                    whole.first_error = whole.first_error or sample.first_error
                else:
                    setattr(whole, f.name, getattr(whole, f.name) + getattr(sample, f.name))
        return whole


async def _chunks(reader: asyncio.StreamReader) -> AsyncIterator[bytes]:
    """The chunks of a chunked HTTP/1.1 body, up to its end (the connection then serves the next request)."""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
        data = await reader.readexactly(size + 2)
        if size == 0:
            return
        yield data[:-2]


def event_tokens(message: dict[str, Any]) -> int:
    """Tokens in one chat.completion.chunk (thinking and answer; `reasoning_content` repeats `reasoning`)."""
    if "error" in message:
        raise Failed(f"error event: {message['error']}")
    deltas = [choice.get("delta") or {} for choice in message.get("choices") or ()]
    return sum(tokens_in((d.get("reasoning") or "") + (d.get("content") or "")) for d in deltas)


async def stream_once(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, request: bytes, load: Load, sample: ClientSample
) -> None:
    """Send `request` on the connection and read its stream to the end, into `sample`."""
    t0 = time.monotonic()
    sent_in_window = load.in_window(t0)
    sample.requests_started += sent_in_window
    writer.write(request)
    head = await reader.readuntil(b"\r\n\r\n")
    status = head.split(b" ", 2)[1]
    if status != b"200" or b"transfer-encoding: chunked" not in head.lower():
        raise Failed(f"HTTP {status.decode()} ({head.splitlines()[0].decode(errors='replace')}), not a chunked stream")
    buffer, streamed, first, last, usage, now = b"", 0, None, 0.0, None, t0
    async for data in _chunks(reader):
        now = time.monotonic()
        *events, buffer = (buffer + data).split(b"\n\n")
        for event in events:
            payload = event.removeprefix(b"data: ")
            if payload == b"[DONE]":
                continue
            message = json.loads(payload)
            usage = message.get("usage") or usage
            tokens = event_tokens(message)
            if not tokens:
                continue
            streamed += tokens
            counted = load.in_window(now)
            if first is None:
                first = now
                if sent_in_window:
                    sample.ttft_s.append(now - t0)
            elif counted:
                sample.gaps_s.append(now - last)
                sample.gap_tokens.append(tokens)
            last = now
            if counted:
                sample.tokens += tokens
                sample.events += 1
    if load.in_window(now):
        sample.requests_completed += 1
        sample.usage_mismatches += usage is None or usage.get("completion_tokens") != streamed


async def _stream_slot(load: Load, delay_s: float, sample: ClientSample) -> None:
    """One stream kept in flight: a request, and the next as soon as it ends, until the window closes."""
    await asyncio.sleep(delay_s)
    request = load.request()
    connection: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
    while time.monotonic() < load.window_end:
        try:
            connection = connection or await asyncio.open_connection(load.host, load.port)
            await stream_once(*connection, request, load, sample)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, Failed) as exc:
            sample.failed(exc)
            if connection is not None:
                connection[1].close()
                connection = None
            await asyncio.sleep(ERROR_PAUSE_S)


async def run(load: Load) -> ClientSample:
    sample = ClientSample()
    mine = range(load.index, load.streams, load.procs)
    starts = [load.start_at + g * load.ramp_s / load.streams for g in mine]
    tasks = [asyncio.create_task(_stream_slot(load, start - time.monotonic(), sample)) for start in starts]
    await asyncio.sleep(load.window_end - time.monotonic())
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return sample


def main() -> None:
    load = Load(**json.loads(sys.argv[1]))
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        sample = runner.run(run(load))
    json.dump(asdict(sample), sys.stdout)


if __name__ == "__main__":
    main()
