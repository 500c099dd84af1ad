"""Ray Serve deployment options and the Serve config file, derived from a policy.

The local launcher applies `deployment_options` to the bound application; the
Helm chart embeds `serve_config` as the RayService's `serveConfigV2`. Both come
from here, so the cluster runs exactly what the policy says.
"""

from __future__ import annotations

from typing import Any

from thinktier.cluster.autoscaling import serve_autoscaling_config
from thinktier.cluster.request_router import serve_request_router_config
from thinktier.policies.schema import Policy, Replicas, Server, Tier

APP_NAME = "thinktier"
APP_IMPORT_PATH = "thinktier.cluster.app:build_app"
INGRESS = "Ingress"
LOAD_BOARD = "LoadBoard"
CLASSIFIER = "DifficultyClassifier"
GIB = 1 << 30
SERVE_TIMEOUT_MARGIN_S = 120
"""Serve's request_timeout_s is server.tier_timeout_s plus this: the Ingress ends a late tier call first, with an
OpenAI-shaped 504; Serve's timeout is the backstop for whatever else holds a request (body, classifier, queues)."""
INGRESS_DRAIN_MARGIN_S = 5
"""A stopping Ingress waits this much longer than server.drain_timeout_s (the tiers' drain): a tier stream cut at the
drain deadline still reaches its client as an SSE error event and [DONE], not as a dropped connection."""
DRAIN_POLL_S = 0.5
"""Serve's graceful_shutdown_wait_loop_s: how often a stopping replica checks whether its requests have ended, so a
drained replica goes within this (Serve's default is 2 s)."""


def tier_deployment_name(tier: str) -> str:
    return f"tier-{tier}"


def pool_resource(tier: str) -> str:
    """Ray custom resource that a tier's worker nodes advertise, so replicas land in the tier's pool."""
    return f"thinktier-pool-{tier}"


def engine_env(tier: Tier) -> dict[str, str]:
    """Environment for a tier replica's vLLM engine (set before vLLM is imported)."""
    env = {"VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
    if tier.pool.accelerator == "cpu":
        env |= {
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            "VLLM_CPU_OMP_THREADS_BIND": tier.engine.cpu_threads or "auto",
        }
    return env


def _tier_scaling(tier: Tier) -> dict[str, Any]:
    """A fixed replica count, or the KV- and straggler-aware autoscaler within [min, max]."""
    replicas = tier.replicas
    if replicas.min == replicas.max:
        return {"num_replicas": replicas.min}
    return {"autoscaling_config": serve_autoscaling_config(tier)}


HAPROXY_ENV = {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1"}
"""Ray Serve's HAProxy mode: HAProxy balances HTTP over Ingress replicas that serve it themselves."""


def ray_env(server: Server) -> dict[str, str]:
    """Environment every Ray process of the cluster needs for the policy's front door (read when Serve starts)."""
    return dict(HAPROXY_ENV) if server.http_proxy == "haproxy" else {}


def http_options(server: Server, host: str) -> dict[str, Any]:
    """Ray Serve's HTTP options for the policy's front door."""
    return {"host": host, "port": server.port, "request_timeout_s": server.tier_timeout_s + SERVE_TIMEOUT_MARGIN_S}


def replica_count_options(replicas: Replicas, **autoscaling: Any) -> dict[str, Any]:
    """A fixed replica count, or Ray Serve's own ongoing-requests autoscaling between min and max (plus the given
    `autoscaling_config` settings; Ray's defaults for the rest)."""
    if replicas.min == replicas.max:
        return {"num_replicas": replicas.min}
    bounds = {"min_replicas": replicas.min, "max_replicas": replicas.max, "initial_replicas": replicas.initial}
    return {"autoscaling_config": bounds | autoscaling}


def _ingress_scaling(server: Server) -> dict[str, Any]:
    """A fixed number of Ingress replicas, or Ray Serve's ongoing-requests autoscaling between min and max."""
    return replica_count_options(server.ingress_replicas, target_ongoing_requests=server.ingress_target_ongoing_requests)


def tier_options(name: str, tier: Tier, in_pools: bool, drain_s: float) -> dict[str, Any]:
    """Serve options of one tier's deployment. `in_pools` pins replicas to the tier's pool resource; a stopping replica
    lets its streams run for up to `drain_s`."""
    actor: dict[str, Any] = {
        "num_cpus": tier.pool.num_cpus,
        "memory": int(tier.pool.memory_gib * GIB),
        "runtime_env": {"env_vars": engine_env(tier)},
    }
    if tier.pool.accelerator == "gpu":
        share = tier.pool.gpu_fraction  # below 1 only with tensor_parallel_size 1 (the policy checks)
        actor["num_gpus"] = tier.engine.tensor_parallel_size if share == 1 else share
        if tier.pool.accelerator_type:
            actor["accelerator_type"] = tier.pool.accelerator_type
    if in_pools:
        actor["resources"] = {pool_resource(name): 1}
    return {
        "name": tier_deployment_name(name),
        "ray_actor_options": actor,
        "max_ongoing_requests": tier.engine.max_num_seqs * 4,
        "graceful_shutdown_timeout_s": drain_s,
        "graceful_shutdown_wait_loop_s": DRAIN_POLL_S,
        "health_check_period_s": 5,  # check_health: a dead engine is replaced within seconds
        "health_check_timeout_s": 120,
        "request_router_config": serve_request_router_config(tier.autoscaling.metrics_interval_s, tier.router_weights),
        **_tier_scaling(tier),
    }


def deployment_options(policy: Policy, in_pools: bool = False) -> dict[str, dict[str, Any]]:
    """Serve options of every deployment of the application, by deployment name."""
    server = policy.server
    light = {"ray_actor_options": {"num_cpus": 0.05}, "graceful_shutdown_timeout_s": 2}
    ingress_drain = {"graceful_shutdown_timeout_s": server.drain_timeout_s + INGRESS_DRAIN_MARGIN_S,
                     "graceful_shutdown_wait_loop_s": DRAIN_POLL_S}
    options: dict[str, dict[str, Any]] = {
        INGRESS: {"name": INGRESS, "max_ongoing_requests": 1024, **light, **ingress_drain, **_ingress_scaling(server)},
        LOAD_BOARD: {"name": LOAD_BOARD, "max_ongoing_requests": 1024, **light},
    }
    if policy.routing.classifier.enabled:
        options[CLASSIFIER] = {"name": CLASSIFIER, "max_ongoing_requests": 256, **light}
    for name, tier in policy.tiers.items():
        opts = tier_options(name, tier, in_pools, server.drain_timeout_s)
        options[opts["name"]] = opts
    logging = {"logging_config": {"encoding": server.log_encoding.upper()}}
    return {name: opts | logging for name, opts in options.items()}


def serve_config(policy: Policy, policy_path: str, in_pools: bool = True) -> dict[str, Any]:
    """A Ray Serve config file (the `serve deploy` / RayService `serveConfigV2` schema) for the policy."""
    return {
        "proxy_location": "EveryNode",
        "http_options": http_options(policy.server, "0.0.0.0"),
        "applications": [
            {
                "name": APP_NAME,
                "route_prefix": "/",
                "import_path": APP_IMPORT_PATH,
                "args": {"policy_path": policy_path},
                "deployments": list(deployment_options(policy, in_pools).values()),
            }
        ],
    }
