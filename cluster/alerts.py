"""Prometheus alerting rules derived from a policy.

Every threshold that the policy states is read from it, never restated: the latency objectives of each
difficulty class (`slos`), the KV occupancy at which the router counts a tier as saturated
(`degradation.saturated_kv_occupancy`), the autoscaler's straggler limit per replica
(`tiers.<tier>.autoscaling.max_stragglers_per_replica`) and the fewest replicas of each deployment
(`tiers.<tier>.replicas.min`, `server.ingress_replicas.min`). What the policy does not say (how long a
condition must hold, the share of shed requests worth a page) is set once here.

The rules are written as Prometheus rule groups (`groups:` of a rules file, which is also the `spec` of a
prometheus-operator PrometheusRule): `thinktier helm alerts --policy FILE` writes a rules file, and
`thinktier helm values` puts the same groups in the chart's `alertRules`. Each alert's `runbook` annotation names
the section of the chart README that says what to do.

The latency histograms carry the tier and the difficulty class the router decided for each request
(deployments/request/metrics.py), so the latency alerts hold each class on each tier to that class's own objective. Every tier
has a rule for every class: the chat tier also serves medium and hard requests (handed over by a saturated or failed
reasoning tier, or sent to it by its model name), and the reasoning tier every class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from thinktier.cluster.serve_config import APP_NAME
from thinktier.deployments.request.ingress import INGRESS
from thinktier.deployments.request.metrics import LATENCY_BUCKETS, PREFIX, RELOADS
from thinktier.deployments.tier.tier import tier_deployment_name
from thinktier.policies.schema import DifficultyClass, Policy

RUNBOOKS = "helm/thinktier/README.md"
"""The file holding one runbook section per alert, headed by the alert's name."""

TTFVT = f"{PREFIX}time_to_first_visible_token_seconds"
E2E = f"{PREFIX}request_duration_seconds"
KV_OCCUPANCY = f"{PREFIX}kv_cache_occupancy_ratio"
STRAGGLERS = f"{PREFIX}stragglers"
REQUESTS = f"{PREFIX}requests_total"
POLICY_RELOADS = f"{RELOADS}_total"
REPLICA_HEALTHY = "ray_serve_deployment_replica_healthy"
"""Ray Serve's healthy replicas per deployment (Ray's metrics agent adds the `ray_` prefix)."""
HEALTH_CHECK_FAILURES = "ray_serve_health_check_failures_total"
"""Ray Serve's failed health checks per replica: a tier replica fails its check when its vLLM engine died, and Serve
replaces it."""

SLO_QUANTILE = 0.99
LATENCY_WINDOW = "10m"
"""Rate window of the latency quantiles: reasoning requests take minutes, so shorter windows hold too few of them."""
SHED_RATIO = 0.01
"""Share of requests answered 429 (no tier could take them) worth an alert."""
SHED_WINDOW = "5m"
FOR = {
    "slo": "10m",
    "kv": "10m",
    "stragglers": "10m",
    "shed": "5m",
    "replicas": "10m",
}
"""How long each condition must hold before its alert fires: long enough for the autoscaler to act (or for a fresh
engine to load its model) first."""
RESTART_WINDOW = "15m"
RELOAD_WINDOW = "15m"

Severity = Literal["critical", "warning"]


@dataclass(frozen=True)
class Alert:
    """One alerting rule. `summary` and `description` may use Prometheus templating ({{ $labels.tier }},
    {{ $value }}). `labels` are added to the alert's own; rules of one name differ in them (one rule per tier or
    deployment), which promtool requires."""

    name: str
    expr: str
    severity: Severity
    summary: str
    description: str
    for_: str | None = None
    labels: tuple[tuple[str, str], ...] = ()

    def rule(self) -> dict[str, Any]:
        rule: dict[str, Any] = {"alert": self.name, "expr": self.expr}
        if self.for_:
            rule["for"] = self.for_
        rule["labels"] = {"severity": self.severity, **dict(self.labels)}
        rule["annotations"] = {
            "summary": self.summary,
            "description": self.description,
            "runbook": f"{RUNBOOKS}#{self.name.lower()}",
        }
        return rule


def _seconds(value: float) -> str:
    return f"{value:g} s"


@dataclass(frozen=True)
class Latency:
    """A latency histogram, its alert, and the field of `slos.<class>` that holds its objective."""

    alert: str
    metric: str
    what: str
    field: str


LATENCIES = (
    Latency("ThinktierTTFVTSLOBreached", TTFVT, "time to first visible token", "ttfvt_s"),
    Latency("ThinktierE2ESLOBreached", E2E, "end-to-end latency", "e2e_s"),
)


def _slo_alert(latency: Latency, tier: str, difficulty: DifficultyClass, objective: float) -> Alert:
    """`latency`'s p99 of `difficulty` requests on `tier` above `objective` seconds. Past the histogram's largest
    finite bucket the quantile saturates at that bucket, so a longer objective is held at the bucket instead (it would
    never fire otherwise)."""
    top = LATENCY_BUCKETS[-1]
    rate = f'rate({latency.metric}_bucket{{tier="{tier}", difficulty="{difficulty}"}}[{LATENCY_WINDOW}])'
    quantile = f"histogram_quantile({SLO_QUANTILE:g}, sum by (namespace, tier, difficulty, le) ({rate}))"
    objective_text = f"their objective of {_seconds(objective)}"
    if objective < top:
        expr, over = f"{quantile} > {objective:g}", f"over {objective_text}"
    else:
        expr, over = f"{quantile} >= {top:g}", f"the longest the histogram resolves ({objective_text})"
    return Alert(
        name=latency.alert,
        expr=expr,
        for_=FOR["slo"],
        severity="critical",
        labels=(("tier", tier), ("difficulty", difficulty)),
        summary=f"p99 {latency.what} of " + "{{ $labels.difficulty }} requests on tier {{ $labels.tier }} is "
        "{{ $value | humanizeDuration }}, " + over,
        description=f"slos.{difficulty}.{latency.field} is {_seconds(objective)}; the p99 over {LATENCY_WINDOW} has "
        f"been above {'it' if objective < top else _seconds(top)} for {FOR['slo']}.",
    )


def slo_alerts(policy: Policy) -> list[Alert]:
    """TTFVT and E2E p99 of each class on each tier against that class's own objectives."""
    return [
        _slo_alert(latency, tier, difficulty, getattr(slo, latency.field))
        for tier in policy.tiers
        for difficulty, slo in policy.slos.items()
        for latency in LATENCIES
    ]


def capacity_alerts(policy: Policy) -> list[Alert]:
    """KV cache pinned at saturation, stragglers the autoscaler did not absorb, requests shed."""
    saturated = policy.degradation.saturated_kv_occupancy
    alerts = [
        Alert(
            name="ThinktierKVCachePinned",
            expr=f"min by (namespace, tier) ({KV_OCCUPANCY}) >= {saturated:g}",
            for_=FOR["kv"],
            severity="warning",
            summary="Every replica of tier {{ $labels.tier }} has held its KV cache at least "
            f"{saturated:.0%} full for {FOR['kv']}",
            description=f"degradation.saturated_kv_occupancy is {saturated:g}: the router counts the tier as saturated, "
            "shrinks budgets, falls back to the chat tier and then sheds.",
        )
    ]
    for tier_name, tier in policy.tiers.items():
        limit = tier.autoscaling.max_stragglers_per_replica
        if tier.autoscaling.signal == "kv_and_stragglers":
            meaning = f"the autoscaler should have added replicas within {FOR['stragglers']}."
        else:
            meaning = (f"the tier scales on ongoing requests ({tier.autoscaling.target_ongoing_requests:g} per "
                       "replica), not on stragglers: long requests hold it; raise its replicas.max or lower its budgets.")
        alerts.append(
            Alert(
                name="ThinktierStragglersAboveLimit",
                expr=f'avg by (namespace, tier) ({STRAGGLERS}{{tier="{tier_name}"}}) > {limit:g}',
                for_=FOR["stragglers"],
                severity="warning",
                labels=(("tier", tier_name),),
                summary="Tier {{ $labels.tier }} has {{ $value | humanize }} stragglers per replica, above the "
                f"autoscaler's limit of {limit:g}",
                description=f"tiers.{tier_name}.autoscaling.max_stragglers_per_replica is {limit:g}; {meaning}",
            )
        )
    alerts.append(
        Alert(
            name="ThinktierRequestsShed",
            expr=f'sum by (namespace) (rate({REQUESTS}{{outcome="shed"}}[{SHED_WINDOW}])) '
            f"/ sum by (namespace) (rate({REQUESTS}[{SHED_WINDOW}])) > {SHED_RATIO:g}",
            for_=FOR["shed"],
            severity="critical",
            summary="{{ $value | humanizePercentage }} of requests get 429: no tier can take them",
            description=f"More than {SHED_RATIO:.0%} of requests were shed (429 with Retry-After) for {FOR['shed']}: "
            "every tier the router may use is saturated.",
        )
    )
    return alerts


def _replica_floor(deployment: str, minimum: int) -> Alert:
    selector = f'{{application="{APP_NAME}", deployment="{deployment}"}}'
    return Alert(
        name="ThinktierReplicasBelowMinimum",
        # absent(): a Ray cluster that is gone reports no replicas at all.
        expr=f"sum by (namespace, application, deployment) ({REPLICA_HEALTHY}{selector}) < {minimum} "
        f"or absent({REPLICA_HEALTHY}{selector})",
        for_=FOR["replicas"],
        severity="critical",
        labels=(("deployment", deployment),),
        summary=f"Deployment {deployment} has fewer healthy replicas than its minimum of {minimum}",
        description=f"The policy keeps {minimum} or more replicas of {deployment}; fewer have been healthy for "
        f"{FOR['replicas']}.",
    )


def health_alerts(policy: Policy) -> list[Alert]:
    """Policy edits that did not apply, deployments below their minimum, engines that died."""
    failed_reloads = f'{POLICY_RELOADS}{{outcome=~"rejected|needs_redeploy"}}'
    alerts = [
        Alert(
            name="ThinktierPolicyReloadFailed",
            expr=f"sum by (namespace, outcome) (increase({failed_reloads}[{RELOAD_WINDOW}])) > 0",
            severity="warning",
            summary="A policy edit was not applied ({{ $labels.outcome }}); the previous policy keeps serving",
            description="rejected: the edited policy is invalid. needs_redeploy: it changes what is built at deploy "
            "time. The Ingress log says which fields.",
        )
    ]
    floors = {INGRESS: policy.server.ingress_replicas.min} | {
        tier_deployment_name(name): tier.replicas.min for name, tier in policy.tiers.items()
    }
    alerts += [_replica_floor(deployment, minimum) for deployment, minimum in floors.items() if minimum > 0]
    failures = f'{HEALTH_CHECK_FAILURES}{{application="{APP_NAME}", deployment=~"{tier_deployment_name(".+")}"}}'
    by = "sum by (namespace, application, deployment)"
    alerts.append(
        Alert(
            name="ThinktierEngineRestarted",
            # A replica's counter appears at its first failure; `or ... * 0` counts it from zero.
            expr=f"{by} ({failures}) - ({by} ({failures} offset {RESTART_WINDOW}) or {by} ({failures}) * 0) > 0",
            severity="warning",
            summary="{{ $labels.deployment }}: {{ $value }} failed health checks in the last "
            f"{RESTART_WINDOW}; Ray Serve replaced the replicas",
            description="A tier replica fails its health check when its vLLM engine died or hung; Ray Serve replaces "
            "it, dropping the requests it held.",
        )
    )
    return alerts


def alert_rules(policy: Policy) -> list[dict[str, Any]]:
    """The policy's alerting rules as Prometheus rule groups."""
    groups = {"thinktier-slo": slo_alerts, "thinktier-capacity": capacity_alerts, "thinktier-health": health_alerts}
    return [{"name": name, "rules": [alert.rule() for alert in build(policy)]} for name, build in groups.items()]
