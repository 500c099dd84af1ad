"""The application builder: one policy in, the bound Serve application out.

`serve run thinktier.cluster.app:build_app policy_path=FILE` and the RayService's serveConfigV2
both come through here; deployment options come from cluster/serve_config.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from ray.serve import Application

from thinktier.cluster.serve_config import CLASSIFIER, INGRESS, LOAD_BOARD, deployment_options, tier_deployment_name
from thinktier.deployments.request.ingress import Ingress
from thinktier.deployments.request.load_board import LoadBoard
from thinktier.deployments.tier.tier import TierReplica
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import Policy

STALE_AFTER_INTERVALS = 5
"""A replica missing this many stats reports is taken for gone."""


class AppArgs(BaseModel):
    policy_path: str | None = None
    """Policy file; the embedded default when unset."""
    in_pools: bool = False
    """Pin tier replicas to their pool's Ray resource (Kubernetes worker groups advertise it)."""


def build_app(args: dict[str, Any] | AppArgs) -> Application:
    args = args if isinstance(args, AppArgs) else AppArgs.model_validate(args)
    policy = load_policy(args.policy_path)
    options = deployment_options(policy, in_pools=args.in_pools)
    classifier = None
    if policy.routing.classifier.enabled:
        from thinktier.deployments.classifier.classifier import DifficultyClassifier

        classifier = DifficultyClassifier.options(**options[CLASSIFIER]).bind(policy.routing.classifier)
    board = LoadBoard.options(**options[LOAD_BOARD]).bind(STALE_AFTER_INTERVALS * _longest_interval(policy))
    tiers = {
        name: TierReplica.options(**options[tier_deployment_name(name)]).bind(
            name, tier, board, policy.server.stream_interval_ms / 1000, classifier
        )
        for name, tier in policy.tiers.items()
    }
    return Ingress.options(**options[INGRESS]).bind(policy, args.policy_path, board, tiers, classifier)


def _longest_interval(policy: Policy) -> float:
    return max(tier.autoscaling.metrics_interval_s for tier in policy.tiers.values())
