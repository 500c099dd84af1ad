"""What the Helm chart renders for monitoring: the ServiceMonitor and the metrics Services it scrapes, the Grafana
dashboard, and the PrometheusRule with the policy's alerts (checked by promtool), each querying only metrics the
service exports."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import prometheus_client
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.helm_chart import (
    CHART,
    DEFAULT,
    MONITORING_APIS,
    PRODUCTION,
    ROOT,
    SERVICE_MONITOR_API,
    Render,
    crd_schema,
    merged_values,
    one_object,
    pod_templates,
)
from tests.system_tools import system_tool
from thinktier.cluster.alerts import alert_rules
from thinktier.deployments.request.metrics import PREFIX, ServiceMetrics
from thinktier.deployments.tier.protocol import Economy
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.loader import load_policy


def test_service_monitor_only_where_the_prometheus_operator_api_exists(render: Render) -> None:
    assert "ServiceMonitor" not in {o["kind"] for o in render(*PRODUCTION)}
    objects = render(*PRODUCTION, api_versions=(SERVICE_MONITOR_API,))
    monitor = one_object(objects, "ServiceMonitor")
    selected = [
        s
        for s in objects
        if s["kind"] == "Service" and monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    ports = [port["name"] for service in selected for port in service["spec"]["ports"]]
    # Each endpoint scrapes exactly one port of one selected Service.
    assert sorted(ports) == sorted(e["port"] for e in monitor["spec"]["endpoints"]) == ["ingress-metrics", "metrics"]
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])


def _selects(service: dict[str, Any], pod: dict[str, Any]) -> bool:
    return service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_metrics_services_reach_the_agents_everywhere_and_the_ingress_once(render: Render) -> None:
    """The metrics agent runs on every pod; the ingress's /metrics is reached through the head's Serve proxy
    only, because every pod runs a proxy and scraping each would count the ingress's counters once per pod."""
    objects = render(*PRODUCTION)
    pods = pod_templates(one_object(objects, "RayService"))
    agents = one_object(objects, "Service", "thinktier-metrics")
    ingress = one_object(objects, "Service", "thinktier-ingress-metrics")
    assert agents["spec"]["clusterIP"] == ingress["spec"]["clusterIP"] == "None"
    assert sorted(group for group, pod in pods.items() if _selects(agents, pod)) == sorted(pods)
    assert [group for group, pod in pods.items() if _selects(ingress, pod)] == ["head"]
    values = merged_values(CHART / "values.yaml", *PRODUCTION)
    (port,) = ingress["spec"]["ports"]
    assert port["port"] == values["servePort"]
    head_ports = {p["name"]: p["containerPort"] for p in pods["head"]["spec"]["containers"][0]["ports"]}
    assert head_ports[port["targetPort"]] == values["servePort"]
    (agent_port,) = agents["spec"]["ports"]
    assert head_ports[agent_port["targetPort"]] == values["monitoring"]["metricsPort"]


def _dashboard_exprs(render: Render) -> list[str]:
    configmap = one_object(render(*DEFAULT), "ConfigMap", "thinktier-dashboard")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = yaml.safe_load(configmap["data"]["thinktier.json"])
    return [t["expr"] for p in dashboard["panels"] for t in p["targets"]]


def test_dashboard_covers_what_operators_watch(render: Render) -> None:
    exprs = _dashboard_exprs(render)
    for wanted in (
        r"histogram_quantile\(0\.(5|9|99), sum by \(tier, le\) \(rate\(thinktier_request_thinking_tokens_bucket",
        r"histogram_quantile\(0\.(5|99), sum by \(tier, le\) \(rate\(thinktier_time_to_first_visible_token_seconds_bucket",
        r"avg by \(tier\) \(thinktier_kv_cache_occupancy_ratio\)",
        r"max by \(tier\) \(thinktier_kv_cache_occupancy_ratio\)",
        r"sum by \(tier\) \(thinktier_stragglers\)",
        r"sum by \(tier\) \(rate\(thinktier_budget_forced_endings_total",
        r"thinktier_prefix_cache_hits_total.* / sum by \(tier\) \(rate\(thinktier_prefix_cache_queries_total",
        r"ray_serve_deployment_replica_healthy",
        r"sum by \(tier, outcome\) \(rate\(thinktier_requests_total",
        r"sum by \(mode\) \(rate\(thinktier_degraded_requests_total",
        r'thinktier_requests_total\{outcome="shed"\}',
        r"sum by \(tier\) \(rate\(thinktier_early_stops_total.*\) / sum by \(tier\) \(rate\(thinktier_requests_total",
    ):
        assert any(re.search(wanted, expr) for expr in exprs), f"no dashboard query matches {wanted}"


_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_HISTOGRAM_SERIES = re.compile(r"_(bucket|sum|count)$")


def _exported_metric_names() -> set[str]:
    """Sample names in the real /metrics exposition of the ingress, with every metric observed once."""
    metrics = ServiceMetrics(
        lambda: {"reasoning": {"tier-reasoning#abc": ReplicaStats(kv_occupancy=0.5, num_running=2, num_waiting=1)}},
        lambda: {"applied": 1},
    )
    for latency in (metrics.ttft, metrics.ttfvt, metrics.e2e):
        latency.labels("reasoning", "hard").observe(1.0)
    for tokens in (metrics.thinking_tokens, metrics.answer_tokens):
        tokens.labels("reasoning").observe(1.0)
    metrics.requests.labels("reasoning", "ok").inc()
    metrics.decisions.labels("reasoning", "high", "classifier").inc()
    metrics.degraded.labels("budget").inc()
    metrics.budget_forced.labels("reasoning").inc()
    metrics.preemptions.labels("reasoning", "hard").inc(2)
    metrics.classifier_latency.observe(0.004)
    metrics.classifier_decisions.labels("easy", "han", "fast").inc()
    metrics.economy(
        "reasoning",
        Economy(samples=4, samples_aborted=1, votes={"7": 3}, majority=False, early_stop="consensus", tokens_saved=10, probes=2),
    )
    text = prometheus_client.generate_latest(metrics.registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def _alert_exprs(render: Render) -> list[str]:
    rule = one_object(render(*PRODUCTION, api_versions=MONITORING_APIS), "PrometheusRule")
    return [r["expr"] for group in rule["spec"]["groups"] for r in group["rules"]]


@pytest.mark.parametrize("exprs", [_dashboard_exprs, _alert_exprs], ids=["dashboard", "alerts"])
def test_dashboard_and_alerts_query_only_metrics_the_service_exports(
    render: Render, exprs: Callable[[Render], list[str]]
) -> None:
    """A renamed metric in deployments/request/metrics.py, or a guessed name in the dashboard or an alert, fails here."""
    exported = {_HISTOGRAM_SERIES.sub("", name) for name in _exported_metric_names()}
    queried = {
        _HISTOGRAM_SERIES.sub("", name)
        for expr in exprs(render)
        for name in _METRIC_NAME.findall(re.sub(r'"[^"]*"', "", expr))
        if "thinktier" in name
    }
    assert queried, "no thinktier metric is queried"
    misprefixed = sorted(name for name in queried if not name.startswith(PREFIX))
    assert misprefixed == [], f"thinktier metrics are served by the ingress with no ray_ prefix: {misprefixed}"
    missing = sorted(queried - exported)
    assert missing == [], (
        f"{missing} are queried, but deployments/request/metrics.py does not export them; it exports "
        f"{sorted(name for name in exported if not name.endswith('_created'))}"
    )


def test_prometheus_rule_carries_the_policys_alerts_and_passes_promtool(render: Render, tmp_path: Path) -> None:
    objects = render(*PRODUCTION, api_versions=MONITORING_APIS)
    rule = one_object(objects, "PrometheusRule")
    jsonschema.validate(rule, crd_schema("PrometheusRule"))
    assert rule["spec"]["groups"] == alert_rules(load_policy(ROOT / "policies/examples/production-h100.yaml"))
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text(yaml.safe_dump(rule["spec"]))  # a PrometheusRule's spec is a Prometheus rules file
    checked = subprocess.run(
        [system_tool("promtool"), "check", "rules", str(rules_file)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_prometheus_rule_only_where_the_operator_api_exists_and_enabled(render: Render) -> None:
    assert "PrometheusRule" not in {o["kind"] for o in render(*PRODUCTION, api_versions=(SERVICE_MONITOR_API,))}
    disabled = render(*PRODUCTION, api_versions=MONITORING_APIS, sets=("monitoring.prometheusRule.enabled=false",))
    assert "PrometheusRule" not in {o["kind"] for o in disabled}
    labelled = render(*PRODUCTION, api_versions=MONITORING_APIS, sets=("monitoring.prometheusRule.labels.release=kps",))
    assert one_object(labelled, "PrometheusRule")["metadata"]["labels"]["release"] == "kps"
