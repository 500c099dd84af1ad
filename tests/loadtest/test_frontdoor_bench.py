"""The front-door benchmark without Ray: the synthetic tier's tokens and totals, the floor's SSE read back by the
client over a real socket, and the tokens/s, CPU and latency arithmetic of the report."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from thinktier.deployments.tier.protocol import TierChunk, TierRequest
from thinktier.loadtest.bench.frontdoor.frontdoor_bench import policy_variant
from thinktier.loadtest.bench.frontdoor.frontdoor_client import ClientSample, Load, chat_body, event_tokens, stream_once
from thinktier.loadtest.bench.frontdoor.frontdoor_floor import create_app
from thinktier.loadtest.bench.frontdoor.frontdoor_report import (
    FrontdoorReport,
    TargetResult,
    Variant,
    VariantResult,
    markdown,
    per_token_s,
)
from thinktier.loadtest.bench.frontdoor.frontdoor_settings import BenchSettings
from thinktier.loadtest.bench.frontdoor.synthetic_stream import WORD, synthetic_chunks, tier_stream
from thinktier.policies.loader import load_policy

RATE = 4000.0
"""Tokens/s per stream in these tests: fast enough to keep them short."""


async def _all(chunks: AsyncIterator[TierChunk]) -> list[TierChunk]:
    return [chunk async for chunk in chunks]


@pytest.mark.parametrize("thinking", [0, 5])
def test_synthetic_tier_streams_exactly_the_budgets_then_the_totals(thinking: int) -> None:
    request = TierRequest("r", thinking_tokens=thinking, answer_tokens=7, messages=({"role": "user", "content": "a b c"},))
    chunks = asyncio.run(_all(synthetic_chunks(request, RATE)))
    *steps, last = chunks
    assert len(steps) == thinking + 7, "one chunk per engine step"
    assert "".join(c.reasoning for c in steps) == WORD * thinking
    assert "".join(c.content for c in steps) == WORD * 7
    assert (last.finish_reason, last.reasoning_tokens, last.answer_tokens, last.prompt_tokens) == ("stop", thinking, 7, 3)
    assert last.first_token_s is not None and last.first_visible_s is not None
    assert not last.reasoning and not last.content


def test_the_tier_stream_is_coalesced_and_names_its_replica() -> None:
    request = TierRequest("r", thinking_tokens=40, answer_tokens=40)
    chunks = asyncio.run(_all(tier_stream(request, RATE, interval_s=0.004, replica="rep-1")))
    assert chunks[0].replica == "rep-1" and all(c.replica is None for c in chunks[1:])
    assert len(chunks) < 40, "80 steps over 20 ms in 4 ms batches"
    whole = TierChunk.joined(chunks)
    assert (whole.reasoning, whole.content, whole.answer_tokens) == (WORD * 40, WORD * 40, 40)


async def _floor_sse(thinking: int, answer: int) -> list[bytes]:
    """The floor's response body to the client's request, as its SSE events."""
    transport = httpx.ASGITransport(app=create_app(RATE, interval_s=0.002))
    async with httpx.AsyncClient(transport=transport, base_url="http://floor") as client:
        response = await client.post("/v1/chat/completions", json=chat_body(thinking, answer))
    assert response.status_code == 200
    return [event + b"\n\n" for event in response.content.split(b"\n\n") if event]


async def _replay(events: list[bytes], load: Load) -> ClientSample:
    """A server that replays `events` as a chunked HTTP response (the first one split over two chunks), and the
    client's measurement of it."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")).split(b":")[1])
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
        first, *rest = events
        for piece in (first[:10], first[10:], *rest):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
            await asyncio.sleep(0.002)
        writer.write(b"0\r\n\r\n")
        await writer.drain()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    load = Load(**{**load.__dict__, "port": port})
    sample = ClientSample()
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await stream_once(reader, writer, load.request(), load, sample)
        writer.close()
    return sample


def test_the_client_reads_the_floors_stream_token_by_token() -> None:
    events = asyncio.run(_floor_sse(thinking=6, answer=10))
    now = time.monotonic()
    load = Load("127.0.0.1", 0, chat_body(6, 10), streams=1, procs=1, index=0, start_at=now, ramp_s=0,
                window_start=now - 1, window_end=now + 60)
    sample = asyncio.run(_replay(events, load))
    text_events = [e for e in events if WORD.encode() in e]
    first_tokens = event_tokens(json.loads(text_events[0].removeprefix(b"data: ")))
    assert (sample.tokens, sample.events, sample.requests_started, sample.requests_completed) == (16, len(text_events), 1, 1)
    assert (sample.errors, sample.usage_mismatches) == (0, 0), "usage.completion_tokens matches the tokens streamed"
    assert len(sample.ttft_s) == 1 and len(sample.gaps_s) == len(text_events) - 1
    assert sum(sample.gap_tokens) == 16 - first_tokens
    assert all(g > 0 for g in sample.gaps_s)


def test_event_tokens_counts_the_reasoning_once() -> None:
    delta = {"reasoning": WORD * 2, "reasoning_content": WORD * 2, "content": WORD}
    assert event_tokens({"choices": [{"index": 0, "delta": delta}]}) == 3
    assert event_tokens({"choices": [], "usage": {"completion_tokens": 3}}) == 0


def _target(name: str, tokens: int, cpu_s: dict[str, list[float]], ttft_s: list[float]) -> TargetResult:
    sample = ClientSample(tokens=tokens, events=tokens // 4, ttft_s=ttft_s, gaps_s=[0.05, 0.01], gap_tokens=[4, 1])
    return TargetResult.of(name, sample, cpu_s, cpu_window_s=10.0, window_s=10.0, offered_tps=2500.0)


def test_tokens_per_second_cpu_and_latency_arithmetic() -> None:
    cpu = {"ingress": [3.0, 2.0], "proxy": [3.0], "tier": [1.5, 0.5], "ray_other": [0.0, 0.0], "client": [1.0]}
    ours = _target("thinktier", 20_000, cpu, [0.1])
    assert (ours.achieved_tps, ours.achieved_ratio, ours.tokens_per_event) == (2000.0, 0.8, 4.0)
    assert ours.cpu_percent == {"ingress": 50.0, "proxy": 30.0, "tier": 20.0, "ray_other": 0.0, "client": 10.0}
    assert ours.server_cores_per_1k_tps == pytest.approx(0.5), "1 core (no client) for 2k tok/s"
    assert ours.front_door_cores_per_1k_tps == pytest.approx(0.4)
    np.testing.assert_allclose(per_token_s([0.05, 0.01], [4, 1]), [0.0125] * 4 + [0.01])
    assert ours.inter_token_ms.count == 5 and ours.inter_event_ms.count == 2
    assert ours.process_cpu_percent["ingress"] == [30.0, 20.0]
    floor = _target("floor", 25_000, {"floor": [2.5], "client": [1.0]}, [0.04])
    assert floor.server_cores_per_1k_tps == pytest.approx(0.1) and floor.front_door_cores_per_1k_tps == pytest.approx(0.1)
    variant = Variant(interval_ms=50, ingress_replicas=1, tokens_per_stream_per_s=10, streams=250)
    result = VariantResult(variant=variant, thinktier=ours, floor=floor)
    assert result.added_ms()["ttft_ms"]["p50"] == pytest.approx(60.0)
    settings = BenchSettings(streams=250, thinking_tokens=16, answer_tokens=16, duration_s=10, client_procs=1).as_dict()
    text = markdown(FrontdoorReport(command="thinktier bench frontdoor", settings=settings, variants=[result]))
    assert "| thinktier | 2,000 | 0.80 | 50 | 30 | 20 | 0 | - | 10 | 0.500 | 0.400 |" in text
    assert "| added by thinktier |" in text and "+60.0" in text
    assert "thinktier processes (CPU % of each): Ingress 2 (30, 20), proxy 1 (30), tier 2 (15, 5), Ray other 2, client 1" in text


def test_variants_and_their_policies(tmp_path: Path) -> None:
    settings = BenchSettings(streams=250, rates=(10_000, 20_000), intervals_ms=(0, 50), ingress_replicas=2, tier_replicas=3)
    variants = settings.variants()
    assert [(v.interval_ms, v.ingress_replicas, v.tokens_per_stream_per_s) for v in variants] == [
        (0, 1, 40), (50, 1, 40), (50, 2, 40), (0, 1, 80), (50, 1, 80), (50, 2, 80)
    ]
    assert variants[-1].offered_tps == 20_000 and settings.ramp_s(variants[0]) == 512 / 40
    policy = load_policy(policy_variant(settings, variants[2], tmp_path / "p.yaml"))
    assert policy.server.stream_interval_ms == 50 and policy.server.ingress_replicas.max == 2
    assert policy.tiers["reasoning"].replicas.min == 3 and not policy.routing.classifier.enabled
