"""What the deployment classes share to state their own Ray Serve options (their `deployment_options`).

Each deployment class says, from the policy, how it runs: its name, replicas, Ray resources, concurrency, health
checks and graceful shutdown, as Ray Serve LLM's deployments do (`LLMServer.get_deployment_options(llm_config)`). The
options have the form of a Serve config file's `deployments:` entry, which is also the keyword arguments of
`Deployment.options`. The cluster layer (cluster/serve_config.py) only composes them, adding what is its own: the
tiers' autoscaling policy, the request router, the pinning of tier replicas to their node pool and the log encoding.
"""

from __future__ import annotations

from typing import Any

from thinktier.policies.schema import Replicas

ServeOptions = dict[str, Any]
"""One deployment's Serve options by option name; the values are what a Serve config file holds (YAML-able)."""
LIGHT_ACTOR_CPUS = 0.05
"""Ray CPUs of a deployment that mostly waits on others (Ingress, load board, classifier), so that they share cores
with the engines."""
QUICK_SHUTDOWN_S = 2
"""Serve's graceful_shutdown_timeout_s of a light deployment whose calls are short (the load board, the classifier)."""
DRAIN_POLL_S = 0.5
"""Serve's graceful_shutdown_wait_loop_s: how often a stopping replica checks whether its requests have ended, so a
drained replica goes within this (Serve's default is 2 s)."""


def light_options(name: str, max_ongoing_requests: int) -> ServeOptions:
    """A deployment that mostly waits on others, holding up to `max_ongoing_requests` calls: a sliver of a core, and a
    quick graceful shutdown (a deployment with longer calls overrides it)."""
    return {
        "name": name,
        "max_ongoing_requests": max_ongoing_requests,
        "ray_actor_options": {"num_cpus": LIGHT_ACTOR_CPUS},
        "graceful_shutdown_timeout_s": QUICK_SHUTDOWN_S,
    }


def replica_count_options(replicas: Replicas, **autoscaling: float) -> ServeOptions:
    """A fixed replica count, or Ray Serve's own ongoing-requests autoscaling between min and max (plus the given
    `autoscaling_config` settings; Ray's defaults for the rest)."""
    if replicas.min == replicas.max:
        return {"num_replicas": replicas.min}
    bounds = {"min_replicas": replicas.min, "max_replicas": replicas.max, "initial_replicas": replicas.initial}
    return {"autoscaling_config": bounds | autoscaling}
