"""The autoscaling policy and the request router running inside real Ray Serve.

The replicas are plain Python deployments, not vLLM: what they report through
`record_autoscaling_stats` / `record_routing_stats` comes from a `Dial` actor that
the test turns. Everything between those reports and the replica count or the
chosen replica is Ray Serve's own machinery calling `KVAwarePolicy` and
`KVAwareRequestRouter`, configured exactly as `serve_autoscaling_config` and
`serve_request_router_config` say.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
import ray
from ray import serve

from thinktier.cluster.autoscaling import serve_autoscaling_config
from thinktier.cluster.request_router import serve_request_router_config
from thinktier.deployments.tier.protocol import TierRequest
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import Autoscaling, DifficultyClass, Replicas

APP = "kv-tier"
DEPLOYMENT = "tier-test"


@ray.remote(num_cpus=0)
class Dial:
    """The engine stats every replica reports: one value for all, or per replica."""

    def __init__(self) -> None:
        self.default: dict[str, float] = ReplicaStats().as_metrics()
        self.per_replica: dict[str, dict[str, float]] = {}
        self.replicas: list[str] = []

    def register(self, replica: str) -> None:
        self.replicas.append(replica)

    def registered(self) -> list[str]:
        return self.replicas

    def set(self, stats: dict[str, float], replica: str | None = None) -> None:
        if replica is None:
            self.default, self.per_replica = stats, {}
        else:
            self.per_replica[replica] = stats

    def get(self, replica: str) -> dict[str, float]:
        return self.per_replica.get(replica, self.default)


@serve.deployment(ray_actor_options={"num_cpus": 0.1}, graceful_shutdown_timeout_s=0.5, graceful_shutdown_wait_loop_s=0.1)
class Reporter:
    def __init__(self, dial: ray.actor.ActorHandle) -> None:
        self.dial = dial
        self.name = serve.get_replica_context().replica_id.unique_id
        ray.get(dial.register.remote(self.name))

    async def record_autoscaling_stats(self) -> dict[str, float]:
        return await self.dial.get.remote(self.name)

    async def record_routing_stats(self) -> dict[str, float]:
        return await self.dial.get.remote(self.name)

    async def generate(self, request: TierRequest, hold_s: float = 0.0) -> str:
        await asyncio.sleep(hold_s)
        return self.name


@pytest.fixture(scope="module")
def dial(serve_port: int) -> Iterator[ray.actor.ActorHandle]:
    """A Dial on the session's Ray; the test application is deleted afterwards."""
    try:
        yield Dial.remote()
    finally:
        serve.delete(APP)


def stats(**fields: float) -> dict[str, float]:
    return ReplicaStats(**fields).as_metrics()


def running_replicas() -> int:
    deployment = serve.status().applications[APP].deployments[DEPLOYMENT]
    return deployment.replica_states.get("RUNNING", 0)


def watch(until: Callable[[int], bool], timeout_s: float) -> list[int]:
    """Replica counts seen (each change once) until `until(count)` holds."""
    seen = [running_replicas()]
    deadline = time.monotonic() + timeout_s
    while not until(seen[-1]):
        assert time.monotonic() < deadline, f"replica counts seen {seen}, condition not met in {timeout_s} s"
        time.sleep(0.2)
        count = running_replicas()
        if count != seen[-1]:
            seen.append(count)
    return seen


def test_policy_scales_a_serve_deployment_up_on_kv_and_down_one_replica_at_a_time(dial):
    targets = Autoscaling(signal="kv_and_stragglers", metrics_interval_s=0.2, upscale_delay_s=1, downscale_delay_s=2)
    tier = load_policy().tiers["reasoning"].model_copy(update={"replicas": Replicas(min=1, max=3), "autoscaling": targets})
    ray.get(dial.set.remote(stats(kv_occupancy=0.1)))
    serve.run(Reporter.options(name=DEPLOYMENT, autoscaling_config=serve_autoscaling_config(tier)).bind(dial), name=APP,
              route_prefix=None)
    assert running_replicas() == 1

    # Every replica's KV at 95% (target 70%): the tier grows, each step once the new replica runs.
    ray.get(dial.set.remote(stats(kv_occupancy=0.95, num_running=2)))
    assert watch(lambda n: n == 3, timeout_s=40) == [1, 2, 3]

    # KV drains: one replica fewer per downscale delay, down to min.
    ray.get(dial.set.remote(stats(kv_occupancy=0.05)))
    assert watch(lambda n: n == 1, timeout_s=40) == [3, 2, 1]
    serve.delete(APP)


def send(handle, difficulty: DifficultyClass, hold_s: float = 0.0):
    request = TierRequest(request_id="t", thinking_tokens=8, answer_tokens=8, prompt="x", difficulty=difficulty)
    return handle.generate.remote(request, hold_s=hold_s)


def sequential(handle, difficulty: DifficultyClass, requests: int = 10) -> Counter[str]:
    return Counter(send(handle, difficulty).result() for _ in range(requests))


def test_router_sends_work_to_kv_headroom_keeps_hard_requests_off_long_ones_and_spreads_bursts(dial):
    ray.get(dial.set.remote(stats()))
    # max_ongoing_requests well above the burst, so no replica refuses and only the scores spread it.
    router_config = serve_request_router_config(0.2)
    app = Reporter.options(name=DEPLOYMENT, num_replicas=2, max_ongoing_requests=64, request_router_config=router_config)
    handle = serve.run(app.bind(dial), name=APP, route_prefix=None)
    a, b = ray.get(dial.registered.remote())[-2:]

    def report(stats_a: dict[str, float], stats_b: dict[str, float]) -> None:
        ray.get([dial.set.remote(stats_a, a), dial.set.remote(stats_b, b)])
        time.sleep(1.5)  # a few routing-stats periods, and the controller's broadcast to the handle

    report(stats(kv_occupancy=0.98, num_running=2), stats(kv_occupancy=0.1, num_running=20))
    assert sequential(handle, "easy") == {b: 10}
    report(stats(kv_occupancy=0.1), stats(kv_occupancy=0.98))
    assert sequential(handle, "easy") == {a: 10}

    # Difficulty from the TierRequest: only hard requests pay for the long requests already on a replica.
    # (Margins exceed one request: a finished call leaves the queue length cache a moment after its result.)
    report(stats(kv_occupancy=0.2, num_long_running=4), stats(kv_occupancy=0.6))
    assert sequential(handle, "easy") == {a: 10}
    assert sequential(handle, "hard") == {b: 10}

    # A burst while a's stats look better: the queue length term still spreads it.
    report(stats(kv_occupancy=0.1), stats(kv_occupancy=0.3))
    burst = [send(handle, "medium", hold_s=2.0) for _ in range(16)]
    spread = Counter(response.result() for response in burst)
    assert min(spread[a], spread[b]) >= 5, spread
    serve.delete(APP)
