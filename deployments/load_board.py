"""Ray Serve deployment of the router: difficulty score + policy + tier load -> Decision."""

from __future__ import annotations

import time

from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments.decision import Decision, RoutingRequest
from deployments.replica_stats import ReplicaStats
from deployments.routing import TierLoad, decide
from policies.loader import DEFAULT_POLICY
from policies.schema import Policy
from policies.watcher import PolicyChange, PolicyWatcher

STALE_AFTER_INTERVALS = 5


@serve.deployment
class Router:
    """Holds the policy and the latest stats of every tier replica (pushed by the replicas)."""

    def __init__(self, policy: Policy, policy_path: str | None, classifier: DeploymentHandle | None = None) -> None:
        self.policy = policy
        self._classifier = classifier
        self._stats: dict[str, dict[str, tuple[float, ReplicaStats]]] = {name: {} for name in policy.tiers}
        self._watcher = PolicyWatcher(policy_path or DEFAULT_POLICY, self._reload, policy=policy)
        self._watcher.start()

    def _reload(self, policy: Policy, change: PolicyChange) -> None:
        self.policy = policy

    async def decide(self, request: RoutingRequest) -> Decision:
        difficulty = None
        if self._classifier is not None and self.policy.routing.classifier.enabled:
            difficulty = await self._classifier.score.remote(request.prompt)
        return decide(self.policy, request, difficulty, self.loads())

    def report(self, tier: str, replica: str, stats: ReplicaStats) -> None:
        self._stats.setdefault(tier, {})[replica] = (time.monotonic(), stats)

    def loads(self) -> dict[str, TierLoad]:
        """Stats of live replicas by tier; a replica that stopped reporting drops out."""
        now = time.monotonic()
        loads = {}
        for tier, replicas in self._stats.items():
            known = tier in self.policy.tiers
            ttl = STALE_AFTER_INTERVALS * self.policy.tiers[tier].autoscaling.metrics_interval_s if known else 0
            live = {r: s for r, (t, s) in replicas.items() if now - t <= ttl}
            self._stats[tier] = {r: replicas[r] for r in live}
            loads[tier] = TierLoad(tuple(live.values()))
        return loads

    def replica_stats(self) -> dict[str, dict[str, ReplicaStats]]:
        """Latest stats by tier and replica id (for /metrics and /readyz)."""
        self.loads()
        return {tier: {r: s for r, (_, s) in replicas.items()} for tier, replicas in self._stats.items()}
