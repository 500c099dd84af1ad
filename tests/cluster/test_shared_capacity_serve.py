"""Shared capacity inside real Ray Serve: the application-level policy decides, and the pool's total caps the tiers.

Two plain Python deployments named as thinktier's tiers, deployed from a Serve config exactly as
`serve_config.serve_application` writes it for a policy whose tiers share a pool (Ray Serve takes an
application-level policy only from a config). Load is held requests; each tier alone would grow to its max.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from ray import serve
from ray.serve.context import _get_global_client
from ray.serve.schema import ServeDeploySchema

from thinktier.cluster.autoscaling import serve_autoscaling_config
from thinktier.cluster.shared_capacity import POLICY_IMPORT_PATH, serve_application_policy
from thinktier.deployments.tier.tier import tier_deployment_name
from thinktier.policies.loader import load_policy
from thinktier.policies.schema import Autoscaling, Policy

APP = "shared-pool"
TIERS = ("reasoning", "chat")


@serve.deployment
class Holder:
    """Stands in for a tier replica: holds each request for a while."""

    def __init__(self, other: object = None) -> None:
        self.other = other

    async def hold(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


def build(args: dict[str, str]) -> serve.Application:
    """The test application: `tier-reasoning` is the ingress and holds a handle to `tier-chat`."""
    chat = Holder.options(name=tier_deployment_name("chat")).bind()
    return Holder.options(name=tier_deployment_name("reasoning")).bind(chat)


def shared_policy() -> Policy:
    """Both tiers 1-3 replicas of half a CPU, scaling on ongoing requests (1 per replica); the pool holds 2 CPUs: 4
    replicas together, where each alone would grow to 3."""
    data = load_policy().model_dump(mode="json")
    targets = Autoscaling(target_ongoing_requests=1, upscale_delay_s=0.5, downscale_delay_s=2, metrics_interval_s=0.2)
    for name in TIERS:
        data["tiers"][name] |= {"replicas": {"min": 1, "max": 3}, "autoscaling": targets.model_dump()}
    data["shared_capacity"] = [{"tiers": list(TIERS), "total": 2.0}]
    return Policy.model_validate(data)


def running() -> dict[str, int]:
    app = serve.status().applications.get(APP)
    deployments = app.deployments if app else {}
    return {name: deployments[tier_deployment_name(name)].replica_states.get("RUNNING", 0) if tier_deployment_name(name)
            in deployments else 0 for name in TIERS}


def watch(until: Callable[[dict[str, int]], bool], timeout_s: float) -> list[dict[str, int]]:
    """Replica counts seen (each change once) until `until` holds."""
    seen = [running()]
    deadline = time.monotonic() + timeout_s
    while not until(seen[-1]):
        assert time.monotonic() < deadline, f"replica counts seen {seen}"
        time.sleep(0.2)
        if running() != seen[-1]:
            seen.append(running())
    return seen


@pytest.fixture
def shared_app(serve_port: int) -> object:
    policy = shared_policy()
    deployments = [
        {"name": tier_deployment_name(name), "max_ongoing_requests": 2, "ray_actor_options": {"num_cpus": 0.1},
         "graceful_shutdown_timeout_s": 0.5, "graceful_shutdown_wait_loop_s": 0.1,
         "autoscaling_config": serve_autoscaling_config(policy.tiers[name])}
        for name in TIERS
    ]
    application = {"name": APP, "route_prefix": None, "import_path": f"{__name__}:build", "deployments": deployments,
                   "autoscaling_policy": serve_application_policy(policy)}
    assert application["autoscaling_policy"]["policy_function"] == POLICY_IMPORT_PATH
    _get_global_client().deploy_apps(ServeDeploySchema.model_validate({"applications": [application]}))
    watch(lambda n: n == {"reasoning": 1, "chat": 1}, timeout_s=60)
    try:
        yield
    finally:
        serve.delete(APP)


def test_tiers_grow_within_the_pool_and_the_busier_one_gets_back_its_share(shared_app: object) -> None:
    reasoning = serve.get_deployment_handle(tier_deployment_name("reasoning"), APP)
    chat = serve.get_deployment_handle(tier_deployment_name("chat"), APP)

    # Only reasoning is loaded (6 requests held, 1 wanted per replica): it grows to its max, as it would alone.
    held = [reasoning.hold.remote(40) for _ in range(6)]
    seen = watch(lambda n: n["reasoning"] == 3, timeout_s=40)
    assert all(n["chat"] == 1 for n in seen)

    # Now chat wants 3 too; each alone would run 3, but the pool holds 4: reasoning gives one back, chat grows to 2.
    held += [chat.hold.remote(40) for _ in range(6)]
    seen = watch(lambda n: n == {"reasoning": 2, "chat": 2}, timeout_s=40)
    assert max(n["reasoning"] + n["chat"] for n in seen) <= 4, seen
    time.sleep(3)  # both still want 3: the split holds
    assert running() == {"reasoning": 2, "chat": 2}
    for response in held:
        response.cancel()
