"""The request router's scorers (cluster/scorers/): each alone, the registry against the policy's weights, and their
weighted sum against the score the router computed before it was split into scorers."""

from __future__ import annotations

import itertools

import pytest

from thinktier.cluster.request_router import score_replica
from thinktier.cluster.scorers import kv_headroom, long_running, queue, stragglers
from thinktier.cluster.scorers.candidate import Candidate
from thinktier.cluster.scorers.registry import SCORERS, scorer, total_score
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.loader import DEFAULT_POLICY, PolicyError, parse_policy
from thinktier.policies.schema import RouterWeights


def candidate(
    queue_len: int = 0, hard: bool = False, kv_occupancy: float = 0.0, num_stragglers: int = 0, num_long_running: int = 0
) -> Candidate:
    stats = ReplicaStats(kv_occupancy=kv_occupancy, num_stragglers=num_stragglers, num_long_running=num_long_running)
    return Candidate(stats, queue_len, hard)


def test_queue_counts_the_requests_the_replica_holds() -> None:
    assert queue.score(candidate(queue_len=7, kv_occupancy=0.9, num_stragglers=3)) == 7.0


def test_kv_headroom_is_occupancy_over_headroom_finite_when_full_and_clamped() -> None:
    assert kv_headroom.score(candidate(kv_occupancy=0.0)) == 0.0
    assert kv_headroom.score(candidate(kv_occupancy=0.5)) == 1.0
    assert kv_headroom.score(candidate(kv_occupancy=0.98)) == pytest.approx(49)
    assert kv_headroom.score(candidate(kv_occupancy=1.0)) == pytest.approx(1 / kv_headroom.MIN_KV_HEADROOM)
    assert kv_headroom.score(candidate(kv_occupancy=1.7)) == kv_headroom.score(candidate(kv_occupancy=1.0))
    assert kv_headroom.score(candidate(kv_occupancy=-0.2)) == 0.0


def test_stragglers_count_the_replicas_stragglers() -> None:
    assert stragglers.score(candidate(queue_len=5, num_stragglers=2)) == 2.0


def test_long_running_counts_long_requests_for_hard_requests_only() -> None:
    assert long_running.score(candidate(hard=True, num_long_running=4)) == 4.0
    assert long_running.score(candidate(hard=False, num_long_running=4)) == 0.0


def test_every_weight_of_the_policy_names_a_registered_scorer_and_every_scorer_has_a_weight() -> None:
    assert set(SCORERS) == set(RouterWeights.model_fields)


def test_an_unknown_scorer_name_is_refused_with_the_known_ones() -> None:
    with pytest.raises(KeyError, match="no replica scorer named 'prefix'; the scorers are kv, long_running, queue, straggler"):
        scorer("prefix")


def test_an_unknown_scorer_name_in_the_policy_is_a_validation_error_naming_the_known_ones() -> None:
    prompt_limit = "    max_prompt_tokens: 512\n"  # first in the reasoning tier
    text = DEFAULT_POLICY.read_text().replace(prompt_limit, prompt_limit + "    router_weights: {prefix: 1}\n", 1)
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "policy.yaml")
    assert "tiers.reasoning.router_weights.prefix: unknown field 'prefix'; the fields here are kv, long_running, queue, " \
        "straggler" in str(err.value)


def score_before_scorers(stats: ReplicaStats, queue_len: int, hard: bool, weights: RouterWeights) -> float:
    """The router's score as one function, before it was split into scorers."""
    kv = min(max(stats.kv_occupancy, 0.0), 1.0)
    score = weights.queue * queue_len
    score += weights.kv * kv / max(1.0 - kv, 0.01)
    score += weights.straggler * stats.num_stragglers
    if hard:
        score += weights.long_running * stats.num_long_running
    return score


def test_the_weighted_sum_of_the_scorers_is_the_score_of_before() -> None:
    weights = (RouterWeights(), RouterWeights(queue=0.5, kv=4, straggler=0, long_running=1.5))
    grid = itertools.product((0.0, 0.3, 0.7, 0.98, 1.0), (0, 1, 9), (0, 2), (0, 3), (False, True), weights)
    for kv, queue_len, straggling, long, hard, weight in grid:
        stats = ReplicaStats(kv_occupancy=kv, num_stragglers=straggling, num_long_running=long)
        expected = score_before_scorers(stats, queue_len, hard, weight)
        assert score_replica(stats, queue_len, hard, weight) == pytest.approx(expected, rel=1e-15, abs=0)
        assert total_score(Candidate(stats, queue_len, hard), weight) == score_replica(stats, queue_len, hard, weight)
