"""KV-aware request routing across the replicas of one tier.

Ray Serve's default router (power of two choices on queue length) treats every
request alike. Reasoning requests are not alike: a replica whose KV cache is
nearly full will queue or preempt a new request however few requests it holds,
stragglers hold KV and batch slots long after their peers finished, and a hard
request placed beside other long ones makes all of them contend for the same
KV for minutes. Each of these is a scorer (cluster/scorers/, one per module);
`score_replica` (pure, lower is better) adds them up, each times its weight from
the tier's `router_weights` in the policy, and the `KVAwareRequestRouter` ranks the
tier's replicas by it for every request.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, ReplicaResult, RequestRouter, RunningReplica

from thinktier.cluster.scorers.candidate import Candidate
from thinktier.cluster.scorers.registry import total_score, weighted_scorers
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.schema import DifficultyClass, RouterWeights

ROUTER_IMPORT_PATH = "thinktier.cluster.request_router:KVAwareRequestRouter"
DIFFICULTIES: tuple[DifficultyClass, ...] = ("easy", "medium", "hard")
DEFAULT_WEIGHTS = RouterWeights()


def score_replica(stats: ReplicaStats, queue_len: int, hard: bool, weights: RouterWeights) -> float:
    """Cost of sending one more request to a replica, in requests of its queue: the weighted sum of the scorers that
    `weights` name (cluster/scorers/registry.py); lower is better."""
    return total_score(Candidate(stats, queue_len, hard), weights)


def difficulty_of(args: list[Any], kwargs: dict[str, Any]) -> DifficultyClass | None:
    """The difficulty class of a tier request, read from the handle call's arguments.

    The router calls the tier as `generate(request)` with a request object that has a
    `difficulty` attribute ("easy" | "medium" | "hard"); Ray Serve hands the router the
    call's arguments unchanged (`PendingRequest.args` / `.kwargs`, resolved before
    routing). None when no argument carries a difficulty.
    """
    for value in (*args, *kwargs.values()):
        difficulty = getattr(value, "difficulty", None)
        if difficulty in DIFFICULTIES:
            return difficulty
    return None


class KVAwareRequestRouter(RequestRouter):
    """Ranks a tier's replicas by `score_replica` for each request.

    Inputs: each replica's `record_routing_stats()` (the keys of `ReplicaStats.as_metrics()`),
    Ray's queue length cache, and what this router itself has in flight on each replica
    (counted from `on_request_routed` to `on_request_completed`, so it is current even when
    the stats are seconds old). Every replica gets its own rank, best first: Serve sends the
    request to the first one that accepts it (a replica at `max_ongoing_requests` refuses).
    Configure with `request_router_kwargs` = the fields of the policy's `RouterWeights`.
    """

    def initialize_state(self, **kwargs: Any) -> None:
        self.weights = RouterWeights.model_validate(kwargs)
        weighted_scorers(self.weights)  # every weight names a registered scorer, or the router fails at its start
        # (internal request id, replica) -> hardness of each call in flight; one request id can
        # cover several calls (e.g. a parent request's self-consistency samples).
        self._in_flight: dict[tuple[str, ReplicaID], list[bool]] = {}
        self._routed: Counter[ReplicaID] = Counter()
        self._routed_hard: Counter[ReplicaID] = Counter()

    def replica_score(self, replica: RunningReplica, hard: bool) -> float:
        replica_id = replica.replica_id
        reported = ReplicaStats.from_metrics(replica.routing_stats or {})
        stats = ReplicaStats(
            kv_occupancy=reported.kv_occupancy,
            num_stragglers=reported.num_stragglers,
            num_long_running=max(reported.num_long_running, self._routed_hard[replica_id]),
        )
        cached = self.replica_queue_len_cache.get(replica_id)
        queue_len = max(cached or 0, self._routed[replica_id])
        return score_replica(stats, queue_len, hard, self.weights)

    async def choose_replicas(
        self, candidate_replicas: list[RunningReplica], pending_request: PendingRequest | None = None
    ) -> list[list[RunningReplica]]:
        # Yield once first. A routing task assigns queued requests back to back without awaiting,
        # and a request is counted in the queue length cache only when its caller resumes and sends
        # it; without this, a whole burst is scored on the same numbers and lands on one replica.
        await asyncio.sleep(0)
        hard = pending_request is not None and difficulty_of(pending_request.args, pending_request.kwargs) == "hard"
        # Shuffle first so that equal scores (e.g. before any stats arrive) do not all pick the same replica.
        ranked = random.sample(candidate_replicas, len(candidate_replicas))
        ranked.sort(key=lambda r: self.replica_score(r, hard))
        return [[r] for r in ranked]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result: ReplicaResult) -> None:
        hard = difficulty_of(pending_request.args, pending_request.kwargs) == "hard"
        self._in_flight.setdefault((pending_request.metadata.internal_request_id, replica_id), []).append(hard)
        self._routed[replica_id] += 1
        self._routed_hard[replica_id] += hard

    def on_request_completed(self, replica_id: ReplicaID, internal_request_id: str) -> None:
        """Also called for calls that were never routed (refused, or sent without the rejection protocol)."""
        key = (internal_request_id, replica_id)
        calls = self._in_flight.get(key)
        if not calls:
            return
        hard = calls.pop()
        if not calls:
            del self._in_flight[key]
        self._routed[replica_id] -= 1
        self._routed_hard[replica_id] -= hard
        if not self._routed[replica_id]:
            del self._routed[replica_id], self._routed_hard[replica_id]


def serve_request_router_config(stats_period_s: float, weights: RouterWeights = DEFAULT_WEIGHTS) -> dict[str, Any]:
    """The tier deployment's `request_router_config` (Serve config file form): replicas report their stats every
    `stats_period_s`, and the router scores them with `weights`."""
    return {
        "request_router_class": ROUTER_IMPORT_PATH,
        "request_router_kwargs": weights.model_dump(),
        "request_routing_stats_period_s": stats_period_s,
        "request_routing_stats_timeout_s": max(stats_period_s, 1.0),
    }
