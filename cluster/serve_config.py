"""Ray Serve deployment options and the Serve config file, derived from a policy.

Each deployment class states its own options from the policy (`deployment_options`, as Ray Serve LLM's
`LLMServer.get_deployment_options`); `deployment_options` here composes them into the application's and adds what is
the cluster's: the tiers' autoscaling policy and request router, the pinning of tier replicas to their node pool, and
the log encoding of every deployment; where tiers share capacity, the application adds one autoscaling policy for all
of them. The local launcher applies them to the bound application; the Helm chart embeds `serve_config` as the
RayService's `serveConfigV2`. Both come from here, so the cluster runs exactly what the policy says.
"""

from __future__ import annotations

from typing import Any

from thinktier.cluster.autoscaling import serve_autoscaling_config
from thinktier.cluster.request_router import serve_request_router_config
from thinktier.cluster.shared_capacity import serve_application_policy
from thinktier.deployments.classifier.classifier import CLASSIFIER, DifficultyClassifier
from thinktier.deployments.request.ingress import INGRESS, Ingress
from thinktier.deployments.request.load_board import LOAD_BOARD, LoadBoard
from thinktier.deployments.serve_options import ServeOptions
from thinktier.deployments.tier.tier import TierReplica, tier_deployment_name
from thinktier.policies.schema import Policy, Server, Tier

APP_NAME = "thinktier"
APP_IMPORT_PATH = "thinktier.cluster.app:build_app"
SERVE_TIMEOUT_MARGIN_S = 120
"""Serve's request_timeout_s is server.tier_timeout_s plus this: the Ingress ends a late tier call first, with an
OpenAI-shaped 504; Serve's timeout is the backstop for whatever else holds a request (body, classifier, queues)."""


def pool_resource(tier: str) -> str:
    """Ray custom resource that a tier's worker nodes advertise, so replicas land in the tier's pool."""
    return f"thinktier-pool-{tier}"


def _tier_scaling(tier: Tier) -> dict[str, Any]:
    """A fixed replica count, or autoscaling within [min, max] on the tier's signal (serve_autoscaling_config)."""
    replicas = tier.replicas
    if replicas.min == replicas.max:
        return {"num_replicas": replicas.min}
    return {"autoscaling_config": serve_autoscaling_config(tier)}


HAPROXY_BUFFER_BYTES = 128 * 1024
HAPROXY_ENV = {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
               "RAY_SERVE_HAPROXY_TUNE_BUFSIZE": str(HAPROXY_BUFFER_BYTES)}
"""Ray Serve's HAProxy mode: HAProxy balances HTTP over Ingress replicas that serve it themselves. HAProxy must hold a
request's whole header block in one buffer; at Ray's 16 KiB a longer one (a large bearer token) got HAProxy's 400 page,
which a client still sending its body often never reads (the connection is reset). 128 KiB passes what Serve's own
proxy passes (headers of 120 KB were served through both); beyond it HAProxy answers 400."""


def ray_env(server: Server) -> dict[str, str]:
    """Environment every Ray process of the cluster needs for the policy's front door (read when Serve starts)."""
    return dict(HAPROXY_ENV) if server.http_proxy == "haproxy" else {}


def http_options(server: Server, host: str) -> dict[str, Any]:
    """Ray Serve's HTTP options for the policy's front door."""
    return {"host": host, "port": server.port, "request_timeout_s": server.tier_timeout_s + SERVE_TIMEOUT_MARGIN_S}


def tier_options(policy: Policy, name: str, in_pools: bool) -> ServeOptions:
    """Serve options of one tier's deployment: the tier replica's own, with the request router and the autoscaler.
    `in_pools` pins replicas to the tier's pool resource."""
    tier = policy.tiers[name]
    options = TierReplica.deployment_options(policy, name)
    if in_pools:
        options["ray_actor_options"] = options["ray_actor_options"] | {"resources": {pool_resource(name): 1}}
    router = serve_request_router_config(tier.autoscaling.metrics_interval_s, tier.router_weights)
    return options | {"request_router_config": router, **_tier_scaling(tier)}


def deployment_options(policy: Policy, in_pools: bool = False) -> dict[str, ServeOptions]:
    """Serve options of every deployment of the application, by deployment name."""
    options = {INGRESS: Ingress.deployment_options(policy), LOAD_BOARD: LoadBoard.deployment_options()}
    if policy.routing.classifier.enabled:
        options[CLASSIFIER] = DifficultyClassifier.deployment_options()
    for name in policy.tiers:
        options[tier_deployment_name(name)] = tier_options(policy, name, in_pools)
    logging = {"logging_config": {"encoding": policy.server.log_encoding.upper()}}
    return {name: opts | logging for name, opts in options.items()}


def serve_application(
    policy: Policy, policy_path: str | None, in_pools: bool, name: str = APP_NAME, route_prefix: str = "/"
) -> dict[str, Any]:
    """The application's entry of a Serve config file. Where tiers share capacity, it carries the application-level
    autoscaling policy that decides for all of them at once (cluster/shared_capacity.py)."""
    application: dict[str, Any] = {
        "name": name,
        "route_prefix": route_prefix,
        "import_path": APP_IMPORT_PATH,
        "args": {"policy_path": policy_path},
        "deployments": list(deployment_options(policy, in_pools).values()),
    }
    if policy.shared_capacity:
        application["autoscaling_policy"] = serve_application_policy(policy)
    return application


def serve_config(policy: Policy, policy_path: str, in_pools: bool = True) -> dict[str, Any]:
    """A Ray Serve config file (the `serve deploy` / RayService `serveConfigV2` schema) for the policy."""
    return {
        "proxy_location": "EveryNode",
        "http_options": http_options(policy.server, "0.0.0.0"),
        "applications": [serve_application(policy, policy_path, in_pools)],
    }
