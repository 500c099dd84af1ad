"""The application builder: one policy in, the bound Serve application out.

`serve run deployments.app:build_app policy_path=FILE` and the RayService's serveConfigV2
both come through here; deployment options come from cluster/serve_config.py.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from ray.serve import Application

from cluster.serve_config import CLASSIFIER, INGRESS, ROUTER, deployment_options, tier_deployment_name
from deployments.ingress import Ingress
from deployments.router import Router
from deployments.tier import TierReplica
from policies.loader import load_policy


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
        from deployments.classifier import DifficultyClassifier

        classifier = DifficultyClassifier.options(**options[CLASSIFIER]).bind(policy.routing.classifier)
    router = Router.options(**options[ROUTER]).bind(policy, args.policy_path, classifier)
    tiers = {
        name: TierReplica.options(**options[tier_deployment_name(name)]).bind(name, tier, router)
        for name, tier in policy.tiers.items()
    }
    return Ingress.options(**options[INGRESS]).bind(policy, args.policy_path, router, tiers)
