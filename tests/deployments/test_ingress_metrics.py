"""/metrics counts the whole service whichever Ingress replica answers the scrape: each replica trades its own
request-level metrics through the LoadBoard and serves them merged with the others'."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.live import eventually, scraped, synthetic_app
from thinktier.deployments.request.load_board import DEPARTED, LoadBoard
from thinktier.deployments.request.metrics import ServiceMetrics


def _series(metrics: ServiceMetrics, sample: str) -> dict[tuple[tuple[str, str], ...], float]:
    text = generate_latest(metrics.registry).decode()
    return {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == sample}


def test_each_ingress_replica_serves_the_counts_of_all_of_them() -> None:
    board = LoadBoard(stale_after_s=60)
    in_flight = {"a": {"acme": 2}, "b": {"acme": 1}}
    reloads = {"a": {"applied": 3}, "b": {"applied": 3}}  # both replicas saw the same three edits of the policy file
    replicas: dict[str, ServiceMetrics] = {}
    peers: dict[str, dict] = {"a": {}, "b": {}}
    for name in ("a", "b"):
        replicas[name] = ServiceMetrics(dict, lambda n=name: reloads[n], lambda n=name: in_flight[n],
                                        lambda n=name: peers[n])
    a, b = replicas["a"], replicas["b"]
    for _ in range(3):
        a.requests.labels("chat", "ok").inc()
    b.requests.labels("chat", "ok").inc()
    b.requests.labels("reasoning", "error").inc()
    a.e2e.labels("chat", "easy").observe(0.2)
    b.e2e.labels("chat", "easy").observe(30)
    for name in ("a", "b"):
        peers[name] = asyncio.run(board.exchange_ingress_metrics(name, replicas[name].snapshot()))
    for name in ("a", "b"):  # after one more round each replica holds the other's latest
        peers[name] = asyncio.run(board.exchange_ingress_metrics(name, replicas[name].snapshot()))

    for metrics in (a, b):
        assert _series(metrics, "thinktier_requests_total") == {
            (("outcome", "ok"), ("tier", "chat")): 4, (("outcome", "error"), ("tier", "reasoning")): 1}
        assert _series(metrics, "thinktier_request_duration_seconds_count") == {(("difficulty", "easy"), ("tier", "chat")): 2}
        buckets = _series(metrics, "thinktier_request_duration_seconds_bucket")
        assert buckets[(("difficulty", "easy"), ("le", "0.25"), ("tier", "chat"))] == 1
        assert buckets[(("difficulty", "easy"), ("le", "+Inf"), ("tier", "chat"))] == 2
        assert _series(metrics, "thinktier_tenant_requests_in_flight") == {(("tenant", "acme"),): 3}
        assert _series(metrics, "thinktier_policy_reloads_total") == {(("outcome", "applied"),): 3}


def test_a_silent_ingress_replica_keeps_its_counts_but_not_its_requests_in_flight() -> None:
    board = LoadBoard(stale_after_s=0)
    gone = ServiceMetrics(dict, dict, lambda: {"acme": 5})
    gone.requests.labels("chat", "ok").inc()
    asyncio.run(board.exchange_ingress_metrics("gone", gone.snapshot()))
    peers = asyncio.run(board.exchange_ingress_metrics("live", ServiceMetrics(dict, dict).snapshot()))
    live = ServiceMetrics(dict, dict, lambda: {"acme": 0}, lambda: peers)
    assert _series(live, "thinktier_requests_total") == {(("outcome", "ok"), ("tier", "chat")): 1}
    assert _series(live, "thinktier_tenant_requests_in_flight") == {(("tenant", "acme"),): 0}


def test_an_older_snapshot_arriving_late_never_lowers_the_total() -> None:
    board = LoadBoard(stale_after_s=60)
    a = ServiceMetrics(dict, dict)
    a.requests.labels("chat", "ok").inc()
    older = a.snapshot()
    a.requests.labels("chat", "ok").inc()
    asyncio.run(board.exchange_ingress_metrics("a", a.snapshot()))  # the scrape's exchange, sent second, arrives first
    asyncio.run(board.exchange_ingress_metrics("a", older))  # the background round's, sent first, arrives last
    b = ServiceMetrics(dict, dict, peers=lambda: peers)
    peers = asyncio.run(board.exchange_ingress_metrics("b", b.snapshot()))
    assert _series(b, "thinktier_requests_total") == {(("outcome", "ok"), ("tier", "chat")): 2}


def test_a_departed_replicas_counts_stay_in_the_totals_after_its_entry_goes() -> None:
    board = LoadBoard(stale_after_s=0.01, departed_after_s=0.02)
    for name, count in (("gone-1", 1), ("gone-2", 2)):
        gone = ServiceMetrics(dict, dict)
        gone.requests.labels("chat", "ok").inc(count)
        asyncio.run(board.exchange_ingress_metrics(name, gone.snapshot()))
    time.sleep(0.05)
    live = ServiceMetrics(dict, dict, peers=lambda: peers)
    peers = asyncio.run(board.exchange_ingress_metrics("live", live.snapshot()))
    assert set(peers) == {DEPARTED}  # two entries folded into one
    assert _series(live, "thinktier_requests_total") == {(("outcome", "ok"), ("tier", "chat")): 3}


@pytest.mark.integration
def test_every_scrape_through_the_proxy_counts_the_requests_of_both_ingress_replicas(serve_port: int, tmp_path: Path) -> None:
    requests = 24
    edits = {"server": {"ingress_replicas": {"min": 2, "max": 2}}, "routing": {"classifier": {"enabled": False}}}
    with synthetic_app(serve_port, tmp_path, "two-ingresses", edits, tokens_per_s=200) as url:
        body = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
        with httpx.Client(timeout=60) as client:  # one connection per request: the proxy spreads them over both
            statuses = {client.post(f"{url}/v1/chat/completions", json=body, headers={"Connection": "close"}).status_code
                        for _ in range(requests)}
        assert statuses == {200}

        def counted() -> float:
            return scraped(url, "thinktier_requests_total", tier="chat", outcome="ok")

        eventually(lambda: counted() == requests, f"no scrape counted all {requests} requests", 20)
        assert [counted() for _ in range(8)] == [requests] * 8  # whichever replica answers


@pytest.mark.integration
def test_two_ingress_replicas_hold_a_tenant_to_its_limit_and_their_counters_never_go_down(
    serve_port: int, tmp_path: Path
) -> None:
    edits = {"server": {"ingress_replicas": {"min": 2, "max": 2}}, "routing": {"classifier": {"enabled": False}},
             "tenants": {"anonymous": {"max_concurrent_requests": 2}}}
    with synthetic_app(serve_port, tmp_path, "two-ingress-limits", edits, tokens_per_s=20) as url:
        body = {"model": "tiny-chat", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 40, "stream": True}

        async def streams() -> list[int]:
            async with httpx.AsyncClient(timeout=60) as client:  # one connection each: the proxy spreads them
                async def one() -> int:
                    async with client.stream("POST", f"{url}/v1/chat/completions", json=body,
                                             headers={"Connection": "close"}) as response:
                        await response.aread()
                        return response.status_code
                return list(await asyncio.gather(*(one() for _ in range(8))))

        statuses = asyncio.run(streams())  # 40 tokens at 20/s: all eight are in flight together
        assert sorted(statuses) == [200, 200] + [429] * 6
        eventually(lambda: scraped(url, "thinktier_tenant_requests_total", tenant="anonymous") == 8, "throttled not counted")

        counts: list[float] = []
        done = threading.Event()

        def traffic() -> None:
            short = {**body, "max_tokens": 2, "stream": False}
            with httpx.Client(timeout=60) as client:
                while not done.is_set():
                    client.post(f"{url}/v1/chat/completions", json=short, headers={"Connection": "close"})

        sender = threading.Thread(target=traffic)
        sender.start()
        try:
            for _ in range(40):
                counts.append(scraped(url, "thinktier_requests_total"))
        finally:
            done.set()
            sender.join()
        assert counts == sorted(counts) and counts[-1] > counts[0], counts


@pytest.mark.integration
def test_a_policy_reload_reaches_both_ingress_replicas(serve_port: int, tmp_path: Path) -> None:
    """Each Ingress replica watches the policy file: after an edit every request is routed by the new rules,
    whichever replica answers it, and after the edit is undone by the old ones again."""
    from tests.live import policy_edit

    edits = {"server": {"ingress_replicas": {"min": 2, "max": 2}}, "routing": {"classifier": {"enabled": False}}}
    with synthetic_app(serve_port, tmp_path, "two-ingress-reload", edits, tokens_per_s=400) as url:
        body = {"model": "tiny-reasoning", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8,
                "reasoning_effort": "high"}

        def degraded(requests: int) -> int:
            with httpx.Client(timeout=60) as client:  # one connection per request: the proxy spreads them over both
                replies = [client.post(f"{url}/v1/chat/completions", json=body, headers={"Connection": "close"})
                           for _ in range(requests)]
            assert {r.status_code for r in replies} == {200}
            return sum("x-thinktier-degraded" in r.headers for r in replies)

        assert degraded(12) == 0
        saturated = {"degradation": {"saturated_waiting_requests": 0}}  # every tier counts as saturated: budgets shrink
        with policy_edit(tmp_path / "two-ingress-reload-policy.yaml", saturated, lambda: degraded(1) == 1):
            eventually(lambda: degraded(12) == 12, "an Ingress replica kept the old policy", 20)
        eventually(lambda: degraded(12) == 0, "an Ingress replica kept the edited policy", 20)
