"""The objects the Helm chart renders (tests/helm_chart.py renders them with real Helm): every one valid, the
optional ones where asked for, worker groups in their pools with their resources, the Serve config and policy
ConfigMap the policy generates, images, API keys, and the install on the chart's own defaults (the embedded
default policy)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import helm_python
import pytest
import yaml

from tests.helm_chart import (
    CHART,
    DEFAULT,
    MONITORING_APIS,
    PRODUCTION,
    ROOT,
    HelmFailed,
    Render,
    merged_values,
    one_object,
    pod_templates,
    validate_object,
    worker_groups,
    yaml_docs,
)
from thinktier.cluster.alerts import alert_rules
from thinktier.cluster.helm_values import POLICY_PATH, render_helm_values
from thinktier.cluster.serve_config import pool_resource, serve_config
from thinktier.policies.loader import DEFAULT_POLICY, load_policy


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
        validate_object(obj)


def test_production_renders_every_optional_object(render: Render) -> None:
    objects = render(*PRODUCTION, api_versions=MONITORING_APIS)
    kinds = {o["kind"] for o in objects}
    assert {"Ingress", "NetworkPolicy", "ServiceMonitor", "PrometheusRule"} <= kinds
    # The existing Secret is used, not a new one.
    assert "Secret" not in kinds
    head = one_object(objects, "RayService")["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
    assert head["containers"][0]["envFrom"] == [{"secretRef": {"name": "thinktier-api-keys"}}]


def test_the_default_install_keeps_ray_inside_the_release(render: Render) -> None:
    policy = one_object(render(*DEFAULT), "NetworkPolicy")
    rules = policy["spec"]["ingress"]
    release_only = [r for r in rules if "ports" not in r]  # every port: only the release's own Ray pods
    assert len(release_only) == 1 and list(release_only[0]["from"][0]) == ["podSelector"]
    dashboard = next(r for r in rules if {"port": 8265, "protocol": "TCP"} in r.get("ports", []))
    assert dashboard["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kuberay-system"}}}]
    open_ports = {p["port"] for r in rules if "from" not in r for p in r["ports"]}
    assert 8265 not in open_ports and 52365 not in open_ports  # the Serve and metrics ports may be open; Ray's are not


def test_helm_v4_sdk_renders_the_same_objects(render: Render) -> None:
    with helm_python.Chart.load(CHART) as chart:
        manifests = chart.render(values=merged_values(*PRODUCTION), name="thinktier", namespace="llm")
    v4 = [doc for name, text in manifests.items() if name.endswith(".yaml") for doc in yaml_docs(text)]
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    assert sorted(v4, key=key) == sorted(render(*PRODUCTION), key=key)


def test_worker_groups_sit_in_their_pools_with_their_resources(render: Render) -> None:
    policy = load_policy(ROOT / "policies/examples/production-h100.yaml")
    rayservice = one_object(render(*PRODUCTION), "RayService")
    workers = worker_groups(rayservice)
    assert set(workers) == set(policy.tiers)
    reasoning = workers["reasoning"]
    pod = reasoning["template"]["spec"]
    assert pod["nodeSelector"]["thinktier.io/pool"] == "reasoning-h100"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert "NVIDIA-H100-80GB-HBM3" in terms[0]["matchExpressions"][0]["values"]
    limits = pod["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "2"  # tensor_parallel_size 2
    # Host memory: the tier's 160 GiB + 16 GiB /dev/shm + 8 GiB overhead.
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
    spec = one_object(render(generated), "RayService")["spec"]["rayClusterConfig"]
    pods = [spec["headGroupSpec"]["template"]["spec"]] + [g["template"]["spec"] for g in spec["workerGroupSpecs"]]
    assert [pod["terminationGracePeriodSeconds"] for pod in pods] == [115] * len(pods)  # 100 s + the Ingress's 5 + 10


def test_head_runs_no_tier_engine(render: Render) -> None:
    head = one_object(render(*PRODUCTION), "RayService")["spec"]["rayClusterConfig"]["headGroupSpec"]
    assert head["rayStartParams"]["num-gpus"] == "0"
    assert "resources" not in head["rayStartParams"]  # no pool resource: tier replicas cannot land here


@pytest.mark.parametrize(
    ("files", "policy_file"),
    [(DEFAULT, "policies/default.yaml"), (PRODUCTION, "policies/examples/production-h100.yaml")],
    ids=["default", "production"],
)
def test_serve_config_is_what_the_policy_generates(render: Render, files: tuple[Path, ...], policy_file: str) -> None:
    rayservice = one_object(render(*files), "RayService")
    policy = load_policy(ROOT / policy_file)
    assert yaml.safe_load(rayservice["spec"]["serveConfigV2"]) == serve_config(policy, POLICY_PATH, in_pools=True)


def test_each_tier_replica_fits_its_worker_group(render: Render) -> None:
    """Every Ray resource a tier replica asks for is advertised by its group's pods, and by no other group."""
    rayservice = one_object(render(*PRODUCTION), "RayService")
    workers = worker_groups(rayservice)
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
    configmap = one_object(objects, "ConfigMap", "thinktier-policy")
    assert configmap["data"]["policy.yaml"] == (ROOT / "policies/default.yaml").read_text()
    cluster = one_object(objects, "RayService")["spec"]["rayClusterConfig"]
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
        pods = pod_templates(one_object(render(*files, sets=keys), "RayService"))
        assert {pod["spec"]["containers"][0]["image"] for pod in pods.values()} == {image}
    assert f"-t thinktier:{app_version}-cpu" in (ROOT / "Dockerfile.cpu").read_text()
    assert f"-t thinktier:{app_version} ." in (ROOT / "Dockerfile").read_text()


def test_api_keys_secret_from_values_and_missing_key_is_refused(render: Render) -> None:
    sets = ("apiKeys.keys.THINKTIER_KEY_ACME=sk-acme", "apiKeys.keys.THINKTIER_KEY_TRIAL=sk-trial")
    objects = render(ROOT / "helm/generated/production-h100.yaml", sets=sets)
    secret = one_object(objects, "Secret")
    assert secret["stringData"] == {"THINKTIER_KEY_ACME": "sk-acme", "THINKTIER_KEY_TRIAL": "sk-trial"}
    with pytest.raises(HelmFailed, match=re.escape("THINKTIER_KEY_TRIAL, which apiKeys.keys lacks")):
        render(ROOT / "helm/generated/production-h100.yaml", sets=sets[:1])


def test_install_without_values_installs_the_embedded_default_policy(render: Render) -> None:
    key = lambda o: (o["kind"], o["metadata"]["name"])  # noqa: E731
    objects = render()
    assert sorted(objects, key=key) == sorted(render(*DEFAULT), key=key)
    assert one_object(objects, "ConfigMap", "thinktier-policy")["data"]["policy.yaml"] == DEFAULT_POLICY.read_text()
    assert set(worker_groups(one_object(objects, "RayService"))) == set(load_policy(DEFAULT_POLICY).tiers)


def test_emptied_policy_values_name_the_fix(render: Render) -> None:
    with pytest.raises(HelmFailed, match=re.escape("thinktier helm values --policy")):
        render(sets=("policy.yaml=",))


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
    rayservice = one_object(objects, "RayService")
    assert set(worker_groups(rayservice)) == set(policy.tiers)
    pdbs = {o["metadata"]["labels"]["thinktier.io/tier"] for o in objects if o["kind"] == "PodDisruptionBudget"}
    assert pdbs == set(policy.tiers)
    for pod in pod_templates(rayservice).values():
        env = {item["name"] for item in pod["spec"]["containers"][0]["env"]}
        assert "RAY_SERVE_ENABLE_HA_PROXY" not in env
    assert one_object(objects, "PrometheusRule")["spec"]["groups"] == alert_rules(policy)


def test_overrides_for_unknown_tier_are_refused(render: Render) -> None:
    with pytest.raises(HelmFailed, match='the policy has no tier "reasonin"'):
        render(*DEFAULT, sets=("workers.tierOverrides.reasonin.priorityClassName=high",))


def test_haproxy_mode_from_the_policy_reaches_head_and_worker_containers(render: Render) -> None:
    assert load_policy(DEFAULT_POLICY).server.http_proxy == "haproxy"
    service = next(doc for doc in render(*DEFAULT) if doc["kind"] == "RayService")
    cluster = service["spec"]["rayClusterConfig"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        env = {item["name"]: item.get("value") for item in group["template"]["spec"]["containers"][0]["env"]}
        assert env["RAY_SERVE_ENABLE_HA_PROXY"] == "1" and env["RAY_SERVE_ENABLE_DIRECT_INGRESS"] == "1"
