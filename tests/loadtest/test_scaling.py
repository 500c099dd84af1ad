"""Scaling on KV occupancy, routing around the busy replica, degrading then shedding: real Serve, real vLLM.

A second application (tests/fixtures/policies/scaling.yaml) joins the session's Ray cluster: its reasoning
tier has a ~4k-token KV cache, so eight concurrent long requests fill it.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.conftest import TESTS

pytestmark = pytest.mark.integration
LONG_PROMPT = "first check the sum then the product of the prime numbers below one hundred " * 15  # ~330 tokens


@pytest.fixture(scope="module")
def scaling_app(serving_cluster: object, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    from thinktier.cluster.local import LocalCluster

    policy = tmp_path_factory.mktemp("scaling") / "policy.yaml"
    shutil.copy(TESTS / "fixtures" / "policies" / "scaling.yaml", policy)
    app = LocalCluster(policy, port=serving_cluster.port, app_name="scaling", route_prefix="/scaling",  # type: ignore[attr-defined]
                       progress=lambda line: print(f"[scaling] {line}"))
    app.start(timeout_s=600)
    yield app.url, policy
    app.stop()


def running_replicas(url: str) -> int:
    """Reasoning replicas that run and report their engine's stats (what /readyz counts)."""
    return httpx.get(f"{url}/readyz", timeout=30).json()["replicas"]["reasoning"]


def wait_for(condition: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f} s waiting for {what}"
        time.sleep(0.5)


class LongLoad:
    """Eight workers sending long high-effort requests until stopped; records which replica served each."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.stop = threading.Event()
        self.served: list[tuple[float, str]] = []  # (send time, replica)
        self.failed: list[str] = []
        self.pool = ThreadPoolExecutor(8)

    def _worker(self, seed: int) -> None:
        """Streams, so the serving replica (a response header) is known when routing happened, not at the end."""
        with httpx.Client(base_url=self.url, timeout=300) as client:
            while not self.stop.is_set():
                sent = time.monotonic()
                body = {"model": "scaling-reasoning", "reasoning_effort": "high", "seed": seed, "temperature": 1.0,
                        "stream": True, "messages": [{"role": "user", "content": LONG_PROMPT}]}
                with client.stream("POST", "/v1/chat/completions", json=body) as response:
                    if response.status_code == 200:
                        self.served.append((sent, response.headers["x-thinktier-replica"]))
                    else:
                        self.failed.append(f"{response.status_code}: {response.read()[:200]!r}")
                    for _ in response.iter_bytes():
                        pass
                seed += 8

    def __enter__(self) -> LongLoad:
        for seed in range(8):
            self.pool.submit(self._worker, seed)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.pool.shutdown(wait=True)


def probe(url: str, effort: str) -> httpx.Response:
    body = {"model": "thinktier", "reasoning_effort": effort, "messages": [{"role": "user", "content": "hi"}]}
    return httpx.post(f"{url}/v1/chat/completions", json=body, timeout=120)


def metric_max(url: str, name: str, tier: str) -> float:
    lines = httpx.get(f"{url}/metrics").text.splitlines()
    values = [float(ln.split()[-1]) for ln in lines if ln.startswith(name + "{") and f'tier="{tier}"' in ln]
    return max(values, default=0.0)


def test_kv_pressure_degrades_sheds_scales_up_steers_and_scales_down(scaling_app: tuple[str, Path]) -> None:
    url, policy = scaling_app
    assert running_replicas(url) == 1
    with LongLoad(url) as load:
        # Saturated (KV past 0.7 on the only replica): high effort shrinks to the low budget, low effort goes to chat.
        wait_for(lambda: metric_max(url, "thinktier_kv_cache_occupancy_ratio", "reasoning") >= 0.7 or load.failed, 120,
                 "KV pressure")
        assert not load.failed, load.failed[:3]
        wait_for(lambda: probe(url, "high").headers.get("x-thinktier-degraded") == "budget:low", 60, "a shrunk budget")
        wait_for(lambda: probe(url, "low").headers.get("x-thinktier-degraded") == "chat", 60, "the chat fallback")
        # Without the chat fallback (a live policy edit) nothing can take a saturated request: 429 + Retry-After.
        original = policy.read_text()
        policy.write_text(original.replace("fallback_to_chat: true", "fallback_to_chat: false"))
        try:
            responses: list[httpx.Response] = []
            wait_for(lambda: responses.append(probe(url, "low")) or responses[-1].status_code == 429, 60, "a 429")
            shed = responses[-1]  # saturation comes and goes: check the 429 that was seen
            assert shed.headers["retry-after"] == "3"
            assert shed.json()["error"]["code"] == "overloaded"
        finally:
            policy.write_text(original)
        wait_for(lambda: metric_max(url, "thinktier_stragglers", "reasoning") >= 1, 60, "stragglers (past 120 thinking tokens)")

        wait_for(lambda: running_replicas(url) == 2, 300, "the KV-aware autoscaler to add a replica")
        old = sorted(load.served)[0][1]  # the load started on the only replica
        wait_for(lambda: any(replica != old for _, replica in load.served), 60, "a request on the new replica")
        scaled_at = min(sent for sent, replica in load.served if replica != old)  # when the new one became routable
        wait_for(lambda: sum(sent >= scaled_at for sent, _ in load.served) >= 5, 180, "requests after the scale-up")
    assert not load.failed, load.failed[:3]
    # The first requests after the scale-up go to the new, empty replica; later ones balance the two.
    after = [replica for sent, replica in sorted(load.served) if sent >= scaled_at][:5]
    assert sum(replica != old for replica in after) >= 4, f"new requests should avoid the full replica {old}: {after}"
    wait_for(lambda: running_replicas(url) == 1, 180, "the scale-down after the load ended")
