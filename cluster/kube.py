"""Kubernetes helpers: put a validated policy into the ConfigMap the chart mounts into every Ray pod.

The router watches the mounted file, so updating the ConfigMap changes routing, budgets and
thresholds live, without restarting engines. Settings that shape the Ray Serve deployments
(tiers, models, pools, replicas) also live in the RayService's serveConfigV2 and need
`thinktier helm values` + `helm upgrade`.
"""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client, config
from kubernetes.client import CoreV1Api
from kubernetes.client.exceptions import ApiException

from thinktier.policies.loader import load_policy

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
    policy, before anything is sent to the cluster.
    """
    load_policy(policy_path)
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
    if (current.data or {}).get(key) == text:
        return UNCHANGED
    api.patch_namespaced_config_map(configmap, namespace, {"data": {key: text}})
    return UPDATED
