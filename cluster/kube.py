"""Kubernetes helpers: put a validated policy into the ConfigMap the chart mounts into every Ray pod.

The router watches the mounted file, so updating the ConfigMap changes routing, budgets and
thresholds live, without restarting engines. Settings that shape the Ray Serve deployments
(tiers, models, pools, replicas) also live in the RayService's serveConfigV2, and API key variables reach the pods
through the chart's Secret: those need `thinktier helm values` + `helm upgrade`, and `apply_policy` refuses a change
to them rather than leave a ConfigMap the deployments do not match.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from thinktier.policies.loader import PolicyError, load_policy, parse_policy
from thinktier.policies.schema import Policy
from thinktier.policies.watcher import policy_change

CREATED = "created"
UPDATED = "updated"
UNCHANGED = "unchanged"


def core_api(context: str | None = None) -> CoreV1Api:
    """A CoreV1Api for `context` from the kubeconfig; without a context, the in-cluster service account
    when running in a pod, else the kubeconfig's current context. KUBECONFIG is read now (the client
    library reads it once, at import)."""
    if context is None:
        try:
            config.load_incluster_config()
            return CoreV1Api()
        except config.ConfigException:
            pass
    kubeconfig = os.environ.get("KUBECONFIG") or None
    return CoreV1Api(config.new_client_from_config(config_file=kubeconfig, context=context))


class NeedsHelmUpgrade(Exception):
    """The policy changes what a ConfigMap update cannot bring into the pods."""

    def __init__(self, fields: list[str]) -> None:
        super().__init__(
            f"not applied: {', '.join(fields)} reach the pods only through the chart (the RayService's serveConfigV2, "
            "the pods' environment), so the running service would not apply them; bring the whole policy in with "
            "`thinktier helm values --policy FILE > generated.yaml && helm upgrade RELEASE helm/thinktier -f "
            "generated.yaml -f your-values.yaml`, which also rewrites this ConfigMap"
        )
        self.fields = fields


def helm_only_changes(old: Policy, new: Policy) -> list[str]:
    """What of the change from `old` to `new` reaches the pods only through `helm upgrade`: deploy-time fields (the
    RayService's serveConfigV2 holds them too), and a tenant's or the metrics' key variable the pods do not have yet
    (the chart sets the pods' environment from its key Secret)."""
    fields = list(policy_change(old, new).redeploy)
    known = {t.api_key_env for t in old.tenants.values()} | {old.server.metrics_api_key_env}
    fields += [f"tenants.{name}.api_key_env ({t.api_key_env})" for name, t in new.tenants.items()
               if t.api_key_env is not None and t.api_key_env not in known]
    metrics_key = new.server.metrics_api_key_env
    if metrics_key is not None and metrics_key not in known:
        fields.append(f"server.metrics_api_key_env ({metrics_key})")
    return fields


def _serving_policy(text: str | None) -> Policy | None:
    """The policy the ConfigMap holds now; None when it holds none or one that does not validate."""
    if not text:
        return None
    try:
        return parse_policy(text)
    except PolicyError:
        return None


def apply_policy(
    policy_path: str | Path,
    *,
    configmap: str,
    namespace: str,
    key: str = "policy.yaml",
    api: CoreV1Api | None = None,
) -> str:
    """Validate the policy, then create the ConfigMap or set its `key` (other keys are kept).

    Returns CREATED, UPDATED or UNCHANGED. Raises thinktier.policies.loader.PolicyError for an invalid
    policy, before anything is sent to the cluster, and NeedsHelmUpgrade, writing nothing, for a change to what
    serves from the ConfigMap that a ConfigMap update cannot bring in (`helm_only_changes`).
    """
    policy = load_policy(policy_path)
    text = Path(policy_path).read_text()
    api = api if api is not None else core_api()
    try:
        current = api.read_namespaced_config_map(configmap, namespace)
    except ApiException as exc:
        if exc.status != 404:
            raise
        body = client.V1ConfigMap(metadata=client.V1ObjectMeta(name=configmap, namespace=namespace), data={key: text})
        api.create_namespaced_config_map(namespace, body)
        return CREATED
    serving_text = (current.data or {}).get(key)
    if serving_text == text:
        return UNCHANGED
    serving = _serving_policy(serving_text)
    if serving is not None and (fields := helm_only_changes(serving, policy)):
        raise NeedsHelmUpgrade(fields)
    api.patch_namespaced_config_map(configmap, namespace, {"data": {key: text}})
    return UPDATED
