"""Each deployment class states its own Serve options from the policy; the cluster's assembly only composes them and adds
what is its own (the tiers' autoscaler and request router, node pools, the log encoding)."""

from __future__ import annotations

from pathlib import Path

import pytest

from thinktier.cluster.serve_config import deployment_options, pool_resource
from thinktier.deployments.classifier.classifier import CLASSIFIER, DifficultyClassifier
from thinktier.deployments.request.ingress import INGRESS, Ingress
from thinktier.deployments.request.load_board import LOAD_BOARD, LoadBoard
from thinktier.deployments.tier.tier import TierReplica, tier_deployment_name
from thinktier.policies.loader import DEFAULT_POLICY, load_policy

POLICIES = [DEFAULT_POLICY, *sorted((Path(__file__).resolve().parents[2] / "policies" / "examples").glob("*.yaml"))]
CLUSTER_KEYS = {"logging_config"}
TIER_CLUSTER_KEYS = CLUSTER_KEYS | {"request_router_config", "num_replicas", "autoscaling_config"}


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_the_assembly_adds_only_the_clusters_options_to_each_deployments_own(path: Path) -> None:
    policy = load_policy(path)
    for in_pools in (False, True):
        composed = deployment_options(policy, in_pools)
        own = {INGRESS: Ingress.deployment_options(policy), LOAD_BOARD: LoadBoard.deployment_options()}
        if policy.routing.classifier.enabled:
            own[CLASSIFIER] = DifficultyClassifier.deployment_options()
        for name, options in own.items():
            assert {k: v for k, v in composed[name].items() if k not in CLUSTER_KEYS} == options
        for tier in policy.tiers:
            name = tier_deployment_name(tier)
            options = TierReplica.deployment_options(policy, tier)
            added = {k: v for k, v in composed[name].items() if k not in TIER_CLUSTER_KEYS}
            pinned = {"resources": {pool_resource(tier): 1}} if in_pools else {}
            assert added == options | {"ray_actor_options": options["ray_actor_options"] | pinned}
        assert set(composed) == set(own) | {tier_deployment_name(t) for t in policy.tiers}


def test_every_deployment_names_itself() -> None:
    policy = load_policy(DEFAULT_POLICY)
    assert Ingress.deployment_options(policy)["name"] == INGRESS == "Ingress"
    assert LoadBoard.deployment_options()["name"] == LOAD_BOARD == "LoadBoard"
    assert DifficultyClassifier.deployment_options()["name"] == CLASSIFIER == "DifficultyClassifier"
    assert TierReplica.deployment_options(policy, "chat")["name"] == tier_deployment_name("chat") == "tier-chat"


def test_stats_hooks_and_the_load_board_run_on_the_replica_event_loop_not_in_serves_thread_pool() -> None:
    """Ray Serve 2.60 runs a replica's plain `def` methods and stats hooks in a thread pool, concurrently with the
    requests on the event loop that add and remove the state the hooks read: samples were lost to "dictionary changed
    size during iteration" under load. `async def` runs them on the loop, one at a time."""
    import inspect

    from thinktier.deployments.request.load_board import LoadBoard
    from thinktier.deployments.tier.tier import TierReplica

    hooks = [TierReplica.record_autoscaling_stats, TierReplica.record_routing_stats, LoadBoard.report,
             LoadBoard.forget, LoadBoard.replica_stats, LoadBoard.exchange_ingress_metrics]
    assert [h.__name__ for h in hooks if not inspect.iscoroutinefunction(h)] == []
