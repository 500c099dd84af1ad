"""Replica scoring of the KV-aware request router, and how it reads a request's difficulty."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest
from pydantic import ValidationError
from ray.serve._private.common import DeploymentHandleSource, DeploymentID
from ray.serve._private.config import DeploymentConfig
from ray.serve.request_router import ReplicaID
from ray.serve.schema import DeploymentSchema

from thinktier.cluster.request_router import KVAwareRequestRouter, difficulty_of, score_replica
from thinktier.cluster.serve_config import APP_NAME, deployment_options, tier_deployment_name
from thinktier.deployments.tier.protocol import TierRequest
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.loader import DEFAULT_POLICY, load_policy, parse_policy
from thinktier.policies.schema import Policy, RouterWeights

WEIGHTS = RouterWeights()


def best(replicas: dict[str, tuple[ReplicaStats, int]], hard: bool = False) -> str:
    return min(replicas, key=lambda name: score_replica(*replicas[name], hard=hard, weights=WEIGHTS))


def route_burst(stats: dict[str, ReplicaStats], requests: int, hard: bool = False) -> Counter[str]:
    """Route a burst one request at a time; the engine stats stay as they were (no report arrives
    during a burst), only the queue lengths grow with what was sent."""
    queue: Counter[str] = Counter()
    for _ in range(requests):
        chosen = best({name: (s, queue[name]) for name, s in stats.items()}, hard)
        queue[chosen] += 1
    return queue


def test_kv_headroom_wins_at_equal_queue_length():
    replicas = {"full": (ReplicaStats(kv_occupancy=0.85), 3), "roomy": (ReplicaStats(kv_occupancy=0.3), 3)}
    assert best(replicas) == "roomy"


def test_two_requests_on_a_full_cache_lose_to_twenty_on_an_empty_one():
    replicas = {"two-long": (ReplicaStats(kv_occupancy=0.98), 2), "twenty-short": (ReplicaStats(kv_occupancy=0.1), 20)}
    assert best(replicas) == "twenty-short"


def test_queue_length_decides_between_equal_replicas():
    same = ReplicaStats(kv_occupancy=0.4)
    assert best({"a": (same, 5), "b": (same, 2)}) == "b"


def test_burst_spreads_evenly_over_equal_replicas():
    same = ReplicaStats(kv_occupancy=0.2)
    assert route_burst({"a": same, "b": same, "c": same}, 30) == {"a": 10, "b": 10, "c": 10}


def test_burst_spreads_even_when_one_replica_reported_more_headroom():
    stats = {"roomy": ReplicaStats(kv_occupancy=0.1), "busy": ReplicaStats(kv_occupancy=0.6)}
    sent = route_burst(stats, 40)
    assert sent["roomy"] > sent["busy"] > 10


def test_full_replica_is_a_last_resort_not_excluded():
    full = score_replica(ReplicaStats(kv_occupancy=1.0), 0, hard=False, weights=WEIGHTS)
    assert full < float("inf")
    assert best({"full": (ReplicaStats(kv_occupancy=1.0), 0), "busy": (ReplicaStats(kv_occupancy=0.5), 60)}) == "busy"


def test_stragglers_push_new_requests_away():
    replicas = {
        "stragglers": (ReplicaStats(kv_occupancy=0.4, num_stragglers=3), 4),
        "clean": (ReplicaStats(kv_occupancy=0.5), 6),
    }
    assert best(replicas) == "clean"


def test_hard_requests_avoid_replicas_holding_many_long_ones_easy_requests_do_not():
    replicas = {
        "long-heavy": (ReplicaStats(kv_occupancy=0.3, num_long_running=4), 4),
        "short-heavy": (ReplicaStats(kv_occupancy=0.45), 7),
    }
    assert best(replicas, hard=True) == "short-heavy"
    assert best(replicas, hard=False) == "long-heavy"


def test_difficulty_is_read_from_the_tier_request_positional_or_keyword():
    request = TierRequest(request_id="r1", thinking_tokens=64, answer_tokens=64, prompt="x", difficulty="hard")
    assert difficulty_of([request], {}) == "hard"
    assert difficulty_of([], {"request": request}) == "hard"
    assert difficulty_of(["plain prompt"], {"stream": True}) is None


def router_of(policy: Policy, tier: str) -> KVAwareRequestRouter:
    """The tier's router as Serve builds it: from the Serve config's request_router_config, which Ray ships to every
    handle as a protobuf."""
    options = deployment_options(policy)[tier_deployment_name(tier)]
    schema = DeploymentSchema(name=options["name"], request_router_config=options["request_router_config"])
    shipped = DeploymentConfig(request_router_config=schema.request_router_config).to_proto_bytes()
    config = DeploymentConfig.from_proto_bytes(shipped).request_router_config
    assert config.get_request_router_class() is KVAwareRequestRouter
    assert config.request_routing_stats_period_s == policy.tiers[tier].autoscaling.metrics_interval_s
    deployment = DeploymentID(name=options["name"], app_name=APP_NAME)
    router = KVAwareRequestRouter(deployment, DeploymentHandleSource.UNKNOWN)
    router.initialize_state(**config.request_router_kwargs)
    return router


def hard_request_goes_to(router: KVAwareRequestRouter, stats: dict[str, ReplicaStats]) -> str:
    deployment = DeploymentID(name="tier-reasoning", app_name=APP_NAME)
    replicas = [
        SimpleNamespace(replica_id=ReplicaID(unique_id=name, deployment_id=deployment), routing_stats=s.as_metrics())
        for name, s in stats.items()
    ]
    return min(replicas, key=lambda r: router.replica_score(r, hard=True)).replica_id.unique_id


def test_router_weights_of_the_policy_change_the_scores() -> None:
    stats = {"long-heavy": ReplicaStats(kv_occupancy=0.3, num_long_running=4), "kv-busy": ReplicaStats(kv_occupancy=0.6)}
    default = router_of(load_policy(DEFAULT_POLICY), "reasoning")
    assert default.weights == RouterWeights()
    assert hard_request_goes_to(default, stats) == "kv-busy"

    prompt_limit = "    max_prompt_tokens: 512\n"  # first in the reasoning tier
    text = DEFAULT_POLICY.read_text().replace(prompt_limit, prompt_limit + "    router_weights: {long_running: 0}\n", 1)
    tuned = router_of(parse_policy(text), "reasoning")
    assert tuned.weights == RouterWeights(long_running=0)
    assert hard_request_goes_to(tuned, stats) == "long-heavy"


def test_router_refuses_unknown_or_negative_weights() -> None:
    router = KVAwareRequestRouter(DeploymentID(name="tier-reasoning", app_name=APP_NAME), DeploymentHandleSource.UNKNOWN)
    with pytest.raises(ValidationError, match=r"kv_weight\n +Extra inputs are not permitted"):
        router.initialize_state(kv_weight=4.0)
    with pytest.raises(ValidationError, match=r"queue\n +Input should be greater than or equal to 0"):
        router.initialize_state(queue=-1)
