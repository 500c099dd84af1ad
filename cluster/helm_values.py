"""Helm values derived from a policy: the bridge between the policy and the chart.

Helm templates cannot run Python, so everything the chart needs from the policy
(the policy text for its ConfigMap, the Ray Serve config, one Ray worker group per
tier with its pool, resources and replica bounds) is computed here and written as a
values file: `thinktier helm values --policy FILE > generated.yaml`, then
`helm install ... -f generated.yaml -f my-values.yaml`. The chart's own values.yaml
holds only Kubernetes concerns, so no tier setting is restated by hand.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from cluster.serve_config import GIB, pool_resource, serve_config
from policies.loader import load_policy
from policies.schema import Policy, Tier

POLICY_MOUNT_DIR = "/etc/thinktier"
"""Where pods mount the policy ConfigMap, as a directory: the kubelet's atomic symlink swap on a
ConfigMap update then reaches the ingress's policy watcher (a subPath mount would never update)."""
POLICY_KEY = "policy.yaml"
POLICY_PATH = f"{POLICY_MOUNT_DIR}/{POLICY_KEY}"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_MAX_GROUP_NAME = 40
"""KubeRay builds pod names from cluster name + group name; long group names get truncated pod names."""


class HelmValuesError(ValueError):
    """The policy is valid but cannot be expressed as a Kubernetes deployment."""


@dataclass(frozen=True)
class WorkerGroup:
    """One tier's Ray worker group: one tier replica per pod, so pod bounds equal replica bounds."""

    tier: str
    accelerator: str
    min_replicas: int
    max_replicas: int
    replicas: int
    cpus: int
    gpus: int
    memory_gib: int
    ray_resources: dict[str, int]
    node_selector: dict[str, str]
    tolerations: list[dict[str, str]]

    @classmethod
    def from_tier(cls, name: str, tier: Tier) -> WorkerGroup:
        if not _DNS_LABEL.match(name) or len(name) > _MAX_GROUP_NAME:
            raise HelmValuesError(
                f"tiers.{name}: a tier name becomes a Kubernetes worker group name and label value; use at most "
                f"{_MAX_GROUP_NAME} lowercase letters, digits and '-', starting and ending with a letter or digit"
            )
        gpus = tier.engine.tensor_parallel_size if tier.pool.accelerator == "gpu" else 0
        resources = {pool_resource(name): 1}
        if gpus and tier.pool.accelerator_type:
            # Declared so the Ray autoscaler knows this group provides the accelerator type (scale from zero).
            resources[f"accelerator_type:{tier.pool.accelerator_type}"] = 1
        replicas = tier.replicas
        return cls(
            tier=name,
            accelerator=tier.pool.accelerator,
            min_replicas=replicas.min,
            max_replicas=replicas.max,
            replicas=replicas.initial if replicas.initial is not None else replicas.min,
            cpus=math.ceil(tier.pool.num_cpus),
            gpus=gpus,
            memory_gib=math.ceil(tier.pool.memory_gib),
            ray_resources=resources,
            node_selector=dict(tier.pool.node_selector),
            tolerations=[dict(t) for t in tier.pool.tolerations],
        )

    def ray_start_params(self) -> dict[str, str]:
        """What the worker's `ray start` advertises: exactly one replica's CPUs, GPUs, memory and pool resource."""
        return {
            "num-cpus": str(self.cpus),
            "num-gpus": str(self.gpus),
            "memory": str(self.memory_gib * GIB),
            # KubeRay passes this verbatim to `ray start --resources=...`, so it carries its own quotes.
            "resources": json.dumps(json.dumps(self.ray_resources)),
        }

    def as_values(self) -> dict[str, Any]:
        return {
            "accelerator": self.accelerator,
            "minReplicas": self.min_replicas,
            "maxReplicas": self.max_replicas,
            "replicas": self.replicas,
            "cpus": self.cpus,
            "gpus": self.gpus,
            "memoryGiB": self.memory_gib,
            "rayStartParams": self.ray_start_params(),
            "nodeSelector": self.node_selector,
            "tolerations": self.tolerations,
        }


class _LiteralDumper(yaml.SafeDumper):
    """Writes multi-line strings as `|` blocks, so the embedded policy and Serve config stay readable,
    and never anchors/aliases (the Serve config shares option dicts between deployments)."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_LiteralDumper.add_representer(str, _str_representer)


def helm_values(policy: Policy, policy_text: str) -> dict[str, Any]:
    """The chart values that come from the policy (see the chart's values.yaml for the rest)."""
    return {
        "policy": {"mountDir": POLICY_MOUNT_DIR, "key": POLICY_KEY, "yaml": policy_text},
        "servePort": policy.server.port,
        "serveConfigV2": yaml.dump(serve_config(policy, POLICY_PATH, in_pools=True), Dumper=_LiteralDumper, sort_keys=False),
        "apiKeyEnvs": sorted({tenant.api_key_env for tenant in policy.tenants.values()}),
        "tiers": {name: WorkerGroup.from_tier(name, tier).as_values() for name, tier in policy.tiers.items()},
    }


def render_helm_values(policy_path: str | Path) -> str:
    """The generated values file for the policy at `policy_path` (validated first; PolicyError when invalid)."""
    policy = load_policy(policy_path)
    values = helm_values(policy, Path(policy_path).read_text())
    header = (
        f"# Generated by `thinktier helm values --policy {policy_path}`. Do not edit: edit the policy,\n"
        "# generate again and pass this file to helm first: helm upgrade --install ... -f THIS -f my-values.yaml\n"
    )
    return header + yaml.dump(values, Dumper=_LiteralDumper, sort_keys=False, width=1000)
