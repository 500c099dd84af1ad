"""The front door from the policy: Ingress replicas (fixed or autoscaled), HAProxy mode, stream interval."""

from __future__ import annotations

from thinktier.cluster.helm_values import helm_values
from thinktier.cluster.serve_config import INGRESS, deployment_options, ray_env
from thinktier.policies.loader import parse_policy
from thinktier.policies.schema import Policy

ONE_TIER = """
version: 1
server: {server}
tiers:
  reasoning: {{model: builtin:tiny-random, engine: {{kv_cache_memory_gib: 0.1}}}}
routing: {{chat_tier: null}}
"""


def with_server(server: str) -> Policy:
    return parse_policy(ONE_TIER.format(server=server), "p.yaml")


def test_ingress_replicas_are_fixed_or_follow_requests_in_flight() -> None:
    fixed = deployment_options(with_server("{}"))[INGRESS]
    assert fixed["num_replicas"] == 1 and "autoscaling_config" not in fixed
    scaled = deployment_options(with_server("{ingress_replicas: {min: 2, max: 8}, ingress_target_ongoing_requests: 64}"))
    assert scaled[INGRESS]["autoscaling_config"] == {
        "min_replicas": 2, "max_replicas": 8, "initial_replicas": None, "target_ongoing_requests": 64,
    }
    assert "num_replicas" not in scaled[INGRESS]


def test_haproxy_mode_reaches_every_ray_process_locally_and_on_kubernetes() -> None:
    policy = with_server("{http_proxy: haproxy, ingress_replicas: {min: 2, max: 2}}")
    env = ray_env(policy.server)
    assert env == {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1"}
    assert helm_values(policy, "")["rayEnv"] == [{"name": name, "value": value} for name, value in env.items()]
    serve_proxy = with_server("{}")
    assert ray_env(serve_proxy.server) == {} and helm_values(serve_proxy, "")["rayEnv"] == []
