"""A real Prometheus (Debian's `prometheus` binary) scrapes the running thinktier as the chart's ServiceMonitor does
(the Ingress's /metrics and Ray's metrics agent), and every query of the chart's Grafana dashboard returns data."""

from __future__ import annotations

import json
import math
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
import yaml

from tests.conftest import free_port
from tests.live import eventually, policy_edit
from tests.system_tools import system_tool
from thinktier.cluster.alerts import alert_rules
from thinktier.policies.loader import load_policy

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "helm" / "thinktier" / "dashboards" / "thinktier.json"
SCRAPE_INTERVAL_S = 1
RATE_INTERVAL = "30s"
"""What Grafana's $__rate_interval stands for here: many scrape intervals, and more than the test's requests span."""
TIMEOUT = httpx.Timeout(120)
QUESTION = [{"role": "user", "content": "what is the sum of 17 and 25"}]


def _chat(url: str, **body: object) -> httpx.Response:
    payload = {"model": "thinktier", "messages": QUESTION, "max_tokens": 4, "max_thinking_tokens": 4, **body}
    return httpx.post(f"{url}/v1/chat/completions", json=payload, timeout=TIMEOUT)


def _query(prometheus: str, expr: str) -> list[dict[str, object]]:
    answer = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=30).json()
    assert answer["status"] == "success", f"{expr}: {answer}"
    return answer["data"]["result"]


def _has_data(prometheus: str, expr: str) -> bool:
    """Whether `expr` returns at least one series with a number (not NaN: a rate over no new samples)."""
    return any(not math.isnan(float(series["value"][1])) for series in _query(prometheus, expr))


@pytest.fixture
def prometheus(serving_url: str, tmp_path: Path) -> Iterator[str]:
    """Prometheus scraping the Ingress's /metrics and this node's Ray metrics agent every second; its URL."""
    import ray

    binary = system_tool("prometheus")
    target = urlsplit(serving_url)
    agent_port = ray.nodes()[0]["MetricsExportPort"]
    config = {
        "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "scrape_timeout": f"{SCRAPE_INTERVAL_S}s"},
        "scrape_configs": [
            {"job_name": "thinktier", "metrics_path": f"{target.path}/metrics", "static_configs": [{"targets": [target.netloc]}]},
            {"job_name": "ray", "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}]},
        ],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:

        def ready() -> bool:
            assert process.poll() is None, f"prometheus exited: {(tmp_path / 'prometheus.log').read_text()[-2000:]}"
            try:
                return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
            except httpx.TransportError:
                return False

        eventually(ready, "prometheus never got ready", 30)
        eventually(lambda: len(_query(url, "up == 1")) == 2, "prometheus never scraped both targets", 30)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        log.close()


def _panels() -> list[tuple[str, list[str]]]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], [t["expr"].replace("$__rate_interval", RATE_INTERVAL) for t in panel["targets"]])
        for panel in dashboard["panels"]
    ]


def _serve_every_kind_of_request(url: str) -> None:
    """A reasoning request (its thinking budget closed by the engine) and a chat request."""
    assert _chat(url, reasoning_effort="high").status_code == 200
    assert _chat(url, thinking=False).status_code == 200


def test_every_dashboard_query_returns_data_from_a_real_prometheus(
    serving_url: str, served_policy_file: Path, prometheus: str
) -> None:
    # Two rounds a few scrapes apart, so every counter and histogram the requests create also grows while scraped.
    for _ in range(2):
        _serve_every_kind_of_request(serving_url)
        # Every tier saturated: a high-effort request is served with a smaller budget (degraded), one for the chat tier
        # has nowhere to go (shed, 429).
        saturated = {"degradation": {"saturated_waiting_requests": 0}}

        def degrading() -> bool:
            return _chat(serving_url, reasoning_effort="high").headers.get("x-thinktier-degraded", "").startswith("budget")

        with policy_edit(served_policy_file, saturated, degrading):
            assert _chat(serving_url, thinking=False).status_code == 429
        eventually(
            lambda: "x-thinktier-degraded" not in _chat(serving_url, reasoning_effort="high").headers,
            "the saturation edit never went away",
            30,
        )
        time.sleep(3 * SCRAPE_INTERVAL_S)
    deadline = time.monotonic() + 30  # Ray's metrics agent exports Serve's gauges every few seconds
    empty = [expr for _, exprs in _panels() for expr in exprs if not _has_data(prometheus, expr)]
    while empty and time.monotonic() < deadline:
        time.sleep(1)
        empty = [expr for expr in empty if not _has_data(prometheus, expr)]
    assert empty == [], f"these dashboard queries return no data from a Prometheus scraping thinktier: {empty}"
    # The replicas panel counts Serve's healthy replicas per deployment of the application, tiers included.
    (replicas_expr,) = next(exprs for title, exprs in _panels() if title.startswith("Replicas"))
    replicas = {s["metric"]["deployment"]: float(s["value"][1]) for s in _query(prometheus, replicas_expr)}
    assert replicas["tier-reasoning"] >= 1 and replicas["tier-chat"] >= 1 and replicas["Ingress"] >= 1
    # The replica-floor alerts read the same Ray metric by the names they use: on this healthy service none fires (a
    # wrong metric or application name would make their absent() fire).
    rules = [rule for group in alert_rules(load_policy(served_policy_file)) for rule in group["rules"]]
    floors = [rule["expr"] for rule in rules if rule["alert"] == "ThinktierReplicasBelowMinimum"]
    assert len(floors) == 3 and all(_query(prometheus, expr) == [] for expr in floors)
    # The latency alerts select the tier and difficulty class by the labels the Ingress observes them under: on each
    # tier, some class's p99 (the alert's expression without its threshold) finds the requests just served.
    quantiles = {(r["labels"]["tier"], r["expr"].rsplit(" >", 1)[0]) for r in rules if r["alert"].endswith("SLOBreached")}
    assert {tier for tier, quantile in quantiles if _has_data(prometheus, quantile)} == {"reasoning", "chat"}
