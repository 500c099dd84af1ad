"""The application builder: one policy in, the bound Serve application out.

`serve run thinktier.cluster.app:build_app policy_path=FILE` and the RayService's serveConfigV2
both come through here. The deployment classes are plain classes that state their own options; here each becomes a
Serve deployment with the options cluster/serve_config.py composes, bound to the handles of the others.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from ray import serve
from ray.serve import Application

from thinktier.cluster.serve_config import deployment_options
from thinktier.deployments.classifier.classifier import CLASSIFIER, DifficultyClassifier
from thinktier.deployments.request.ingress import INGRESS, Ingress
from thinktier.deployments.request.load_board import LOAD_BOARD, LoadBoard
from thinktier.deployments.request.routing_view import stale_after_s
from thinktier.deployments.tier.tier import TierReplica, tier_deployment_name
from thinktier.policies.loader import load_policy


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
        classifier = serve.deployment(**options[CLASSIFIER])(DifficultyClassifier).bind(policy.routing.classifier)
    board = serve.deployment(**options[LOAD_BOARD])(LoadBoard).bind(stale_after_s(policy))
    tiers = {
        name: serve.deployment(**options[tier_deployment_name(name)])(TierReplica).bind(
            name, tier, board, policy.server.stream_interval_ms / 1000, classifier
        )
        for name, tier in policy.tiers.items()
    }
    return serve.deployment(**options[INGRESS])(Ingress).bind(policy, args.policy_path, board, tiers, classifier)


