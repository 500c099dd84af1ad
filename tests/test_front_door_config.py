"""The front door from the policy: Ingress replicas (fixed or autoscaled), HAProxy mode, stream interval."""

from __future__ import annotations

from cluster.helm_values import helm_values
from cluster.serve_config import INGRESS, deployment_options, ray_env
from policies.loader import DEFAULT_POLICY, load_policy, parse_policy


def with_server(server: str):
    text = DEFAULT_POLICY.read_text().replace("server:\n  host: 127.0.0.1\n  port: 8000\n", f"server:\n  {server}\n")
    assert server in text
    return parse_policy(text, "p.yaml")


def test_ingress_replicas_are_fixed_or_follow_requests_in_flight() -> None:
    fixed = deployment_options(load_policy())[INGRESS]
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
    assert helm_values(policy, "")["rayEnv"] == env
    assert ray_env(load_policy().server) == {} and helm_values(load_policy(), "")["rayEnv"] == {}
