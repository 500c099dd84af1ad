"""Prometheus metrics of the service, served by the ingress at /metrics.

Request-level metrics are observed by the ingress, which sees every stream from start
to end. Engine-level figures (KV occupancy, running/waiting, stragglers, preemptions)
are pushed by the tier replicas to the LoadBoard; the ingress reads them at scrape time.

With several Ingress replicas each observes only its own requests, and a scrape reaches one
of them. So each replica pushes a snapshot of its own request-level samples to the LoadBoard
(`IngressSnapshot`), and /metrics serves its own live figures merged with the other replicas'
latest snapshots: the whole service's counts, whichever replica answers.

Counters never go down for a scraper, whichever replica answers: a scrape first sends the answering replica's live
snapshot to the board and takes the others' from it (so a later scrape, at any replica, sees at least these); the board
keeps each replica's latest snapshot by its sequence number, and folds the counters of a replica gone for good into
one departed total instead of dropping them. While the board cannot be reached a scrape serves the last snapshots it
has, which may be older than another replica's (counted in thinktier_load_board_errors_total{call="exchange_metrics"}).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from prometheus_client import CollectorRegistry, Counter, Histogram, Metric
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from thinktier.deployments.tier.protocol import Economy
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.policies.watcher import Outcome

LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 60, 120, 300, 600, 1200)
"""Up to 20 minutes: a reasoning request may run for `server.tier_timeout_s` (600 s by default), and a latency
objective past the largest finite bucket cannot be resolved (cluster/alerts.py)."""
LATENCY_LABELS = ("tier", "difficulty")
"""The latency histograms' labels: the policy's objectives are per difficulty class (`slos`), the class the router
decided (`Decision.difficulty`), so the alerts hold each class to its own."""
CLASSIFIER_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 0.5, 1)
TOKEN_BUCKETS = (0, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768)
PREFIX = "thinktier_"
SampleKey = tuple[str, str, tuple[tuple[str, str], ...]]
"""A sample of a metric family: the family's name, the sample's name (`..._total`, `..._bucket`, ...), its labels."""
Samples = dict[SampleKey, float]
RELOADS = f"{PREFIX}policy_reloads"
"""Every Ingress replica watches the same policy file and counts each reload: replicas merge by max, not sum."""


@dataclass(frozen=True)
class IngressSnapshot:
    """One Ingress replica's request-level samples: counters and histograms (part of the service's totals for good),
    and gauges (requests in flight now: dropped once the replica stops reporting)."""

    counters: Samples = field(default_factory=dict)
    gauges: Samples = field(default_factory=dict)
    seq: int = 0
    """Taken in order by its replica: the load board keeps a replica's latest, whatever order its calls arrive in."""

    def without_gauges(self) -> IngressSnapshot:
        return IngressSnapshot(self.counters, seq=self.seq)

    def plus(self, other: IngressSnapshot) -> IngressSnapshot:
        """Counters of both, added up (policy reloads: the larger); no gauges."""
        return IngressSnapshot(merge_samples(self.counters, other.counters))


def merge_samples(a: Samples, b: Samples) -> Samples:
    """Two replicas' samples as one: added up, except policy reloads (every replica counts the same file's reloads)."""
    merged = dict(a)
    for key, value in b.items():
        known = merged.get(key)
        merged[key] = value if known is None else (max if key[0] == RELOADS else operator.add)(known, value)
    return merged


class ServiceMetrics:
    def __init__(
        self, replica_stats: Callable[[], dict[str, dict[str, ReplicaStats]]], policy_reloads: Callable[[], dict[Outcome, int]],
        tenants_in_flight: Callable[[], dict[str, int]] = dict,
        peers: Callable[[], dict[str, IngressSnapshot]] = dict,
    ) -> None:
        """`peers`: the other Ingress replicas' latest snapshots, merged into what `registry` serves."""
        self.own = CollectorRegistry()
        """This replica's request-level metrics (what `snapshot` takes)."""
        r = self.own
        self.requests = Counter(
            f"{PREFIX}requests", "Requests by tier and outcome: ok, error, timeout, client_error, shed (429), abandoned "
            "(the client closed its stream before the end).", ["tier", "outcome"], registry=r,
        )
        self.decisions = Counter(
            f"{PREFIX}routing_decisions", "Routing decisions by tier, effort and reason.", ["tier", "effort", "reason"],
            registry=r,
        )
        self.tenant_requests = Counter(
            f"{PREFIX}tenant_requests", "Requests of each tenant (the policy's tenants and anonymous) by admission: "
            "admitted, or throttled at the tenant's concurrency limit.", ["tenant", "outcome"], registry=r,
        )
        self.degraded = Counter(f"{PREFIX}degraded_requests", "Requests served degraded, by mode.", ["mode"], registry=r)
        self.borrowed = Counter(
            f"{PREFIX}borrowed_requests", "Requests of tier `home` served on capacity tier `lender` lent (policy lending).",
            ["home", "lender"], registry=r,
        )
        self.classifier_timeouts = Counter(
            f"{PREFIX}classifier_timeouts", "Requests routed without a difficulty score: the classifier passed its timeout.",
            registry=r,
        )
        self.load_board_errors = Counter(
            f"{PREFIX}load_board_errors", "Failed calls of the Ingress to the load board, by call (replica_stats: the "
            "routing view; exchange_metrics: the other Ingress replicas' metrics; sync_slots and acquire_slot: the tenants' "
            "requests in flight across the service). Routing keeps its last view until it is stale, then routes "
            "without load information; a tenant limit falls back to this replica's share of it.", ["call"], registry=r,
        )
        self.classifier_failures = Counter(
            f"{PREFIX}classifier_failures", "Requests routed without a difficulty score: the classifier's call failed "
            "(an error other than its timeout: a dead replica, an error in scoring).", registry=r,
        )
        self.classifier_latency = Histogram(
            f"{PREFIX}classifier_latency_seconds", "Time to a prompt's difficulty score, as the ingress waits for it "
            "(batching and the call included).", buckets=CLASSIFIER_BUCKETS, registry=r,
        )
        self.classifier_decisions = Counter(
            f"{PREFIX}classifier_decisions", "Prompts scored by the difficulty classifier, by the class it gave, the "
            "prompt's writing system (deployments/request/scripts_of_text.py: latin, han, japanese, arabic, ...) and the "
            "head that scored it (fast: without the embedding; whole).",
            ["difficulty", "script", "stage"], registry=r,
        )
        self.ttft = Histogram(
            f"{PREFIX}time_to_first_token_seconds", "Time to the first token (thinking or answer).", LATENCY_LABELS,
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.ttfvt = Histogram(
            f"{PREFIX}time_to_first_visible_token_seconds", "Time to the first answer token.", LATENCY_LABELS,
            buckets=LATENCY_BUCKETS, registry=r,
        )
        self.e2e = Histogram(
            f"{PREFIX}request_duration_seconds", "Request start to last token.", LATENCY_LABELS, buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.thinking_tokens = Histogram(
            f"{PREFIX}request_thinking_tokens", "Thinking tokens per request.", ["tier"], buckets=TOKEN_BUCKETS, registry=r
        )
        self.answer_tokens = Histogram(
            f"{PREFIX}request_answer_tokens", "Answer tokens per request.", ["tier"], buckets=TOKEN_BUCKETS, registry=r
        )
        self.budget_forced = Counter(
            f"{PREFIX}budget_forced_endings", "Requests whose thinking was closed by the budget.", ["tier"], registry=r
        )
        self.preemptions = Counter(
            f"{PREFIX}request_preemptions", "Times the engine preempted requests, by tier and difficulty class (each paid "
            "by a recompute, or a load from host memory, on resume).", ["tier", "difficulty"], registry=r,
        )
        self.samples_started = Counter(
            f"{PREFIX}samples_started", "Self-consistency samples started (requests with samples > 1).", ["tier"], registry=r
        )
        self.samples_aborted = Counter(
            f"{PREFIX}samples_aborted", "Self-consistency samples aborted by an early consensus.", ["tier"], registry=r
        )
        self.early_stops = Counter(
            f"{PREFIX}early_stops", "Requests stopped early, by kind: consensus (enough samples agreed) or certainty "
            "(the answer probes agreed).", ["tier", "kind"], registry=r,
        )
        self.tokens_saved = Counter(
            f"{PREFIX}early_stop_saved_tokens", "Tokens not generated thanks to early stops, estimated from the budget.",
            ["tier", "kind"], registry=r,
        )
        self.no_majority = Counter(
            f"{PREFIX}votes_without_majority", "Self-consistent requests whose chosen answer had no strict majority.",
            ["tier"], registry=r,
        )
        self.certainty_probes = Counter(
            f"{PREFIX}certainty_probes", "Answer probes sent by certainty-based early exit.", ["tier"], registry=r
        )
        r.register(_ReloadCollector(policy_reloads))
        r.register(_TenantCollector(tenants_in_flight))
        self._snapshots = 0
        self.registry = CollectorRegistry()
        """What /metrics serves: every Ingress replica's request-level metrics merged, and the engines' figures."""
        self.registry.register(_MergedCollector(self.own, peers))
        self.registry.register(_EngineCollector(replica_stats))

    def economy(self, tier: str, economy: Economy) -> None:
        """What self-consistency and early stopping did for one finished request."""
        if economy.votes is not None:
            self.samples_started.labels(tier).inc(economy.samples)
            self.samples_aborted.labels(tier).inc(economy.samples_aborted)
            if not economy.majority:
                self.no_majority.labels(tier).inc()
        self.certainty_probes.labels(tier).inc(economy.probes)
        if economy.early_stop is not None:
            self.early_stops.labels(tier, economy.early_stop).inc()
            self.tokens_saved.labels(tier, economy.early_stop).inc(economy.tokens_saved)

    def snapshot(self) -> IngressSnapshot:
        """This replica's own request-level samples, for the LoadBoard, numbered in order."""
        self._snapshots += 1
        return replace(snapshot(self.own), seq=self._snapshots)


def snapshot(registry: CollectorRegistry) -> IngressSnapshot:
    counters: Samples = {}
    gauges: Samples = {}
    for family in registry.collect():
        into = gauges if family.type == "gauge" else counters
        for sample in family.samples:
            if not sample.name.endswith("_created"):  # a timestamp per replica: nothing to add up
                into[(family.name, sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return IngressSnapshot(counters, gauges)


class _MergedCollector(Collector):
    """This replica's request-level metrics with the other Ingress replicas' added (policy reloads: the largest)."""

    def __init__(self, own: CollectorRegistry, peers: Callable[[], dict[str, IngressSnapshot]]) -> None:
        self._own = own
        self._peers = peers

    def collect(self) -> Iterator[Metric]:
        total: Samples = {}
        for one in (snapshot(self._own), *self._peers().values()):
            total = merge_samples(total, one.counters | one.gauges)
        merged: dict[str, dict[tuple[str, tuple[tuple[str, str], ...]], float]] = {}
        for (family, sample, labels), value in total.items():
            merged.setdefault(family, {})[(sample, labels)] = value
        for own in self._own.collect():
            metric = Metric(own.name, own.documentation, own.type)
            for (sample, labels), value in merged.get(own.name, {}).items():
                metric.add_sample(sample, dict(labels), value)
            yield metric


class _TenantCollector(Collector):
    """Requests in flight per tenant (the policy's tenants: a bounded label set)."""

    def __init__(self, in_flight: Callable[[], dict[str, int]]) -> None:
        self._in_flight = in_flight

    def collect(self) -> Iterator[GaugeMetricFamily]:
        gauge = GaugeMetricFamily(f"{PREFIX}tenant_requests_in_flight", "Requests in flight per tenant.", labels=["tenant"])
        for tenant, count in sorted(self._in_flight().items()):
            gauge.add_metric([tenant], count)
        yield gauge


class _ReloadCollector(Collector):
    """Policy reloads by outcome (applied, rejected, needs_redeploy), as counted by this process's watcher."""

    def __init__(self, policy_reloads: Callable[[], dict[Outcome, int]]) -> None:
        self._policy_reloads = policy_reloads

    def collect(self) -> Iterator[CounterMetricFamily]:
        reloads = CounterMetricFamily(f"{PREFIX}policy_reloads", "Policy file reloads by outcome.", labels=["outcome"])
        for outcome, count in self._policy_reloads().items():
            reloads.add_metric([outcome], count)
        yield reloads


class _EngineCollector(Collector):
    """Per-replica engine figures, from the LoadBoard's latest reports."""

    def __init__(self, replica_stats: Callable[[], dict[str, dict[str, ReplicaStats]]]) -> None:
        self._replica_stats = replica_stats

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        labels = ["tier", "replica"]
        kv = GaugeMetricFamily(f"{PREFIX}kv_cache_occupancy_ratio", "Share of the replica's KV cache in use.", labels=labels)
        running = GaugeMetricFamily(f"{PREFIX}requests_running", "Requests decoding on the replica.", labels=labels)
        waiting = GaugeMetricFamily(f"{PREFIX}requests_waiting", "Requests queued in the replica's engine.", labels=labels)
        stragglers = GaugeMetricFamily(f"{PREFIX}stragglers", "Running requests past the straggler limit.", labels=labels)
        preemptions = CounterMetricFamily(f"{PREFIX}preemptions", "Engine preemptions on the replica.", labels=labels)
        cache_queries = CounterMetricFamily(
            f"{PREFIX}prefix_cache_queries", "Prompt tokens looked up in the replica's prefix cache.", labels=labels
        )
        cache_hits = CounterMetricFamily(
            f"{PREFIX}prefix_cache_hits", "Prompt tokens found in the replica's prefix cache.", labels=labels
        )
        offload: dict[str, CounterMetricFamily] = {
            "kv_offload_stored_bytes_total": CounterMetricFamily(
                f"{PREFIX}kv_offload_stored_bytes", "KV bytes the replica copied to host memory.", labels=labels
            ),
            "kv_offload_loaded_bytes_total": CounterMetricFamily(
                f"{PREFIX}kv_offload_loaded_bytes", "KV bytes the replica copied back from host memory.", labels=labels
            ),
            "preemptions_resumed_from_host_total": CounterMetricFamily(
                f"{PREFIX}preemptions_resumed_from_host",
                "Preempted requests resumed from KV kept in host memory instead of recomputing.", labels=labels,
            ),
            "preempted_tokens_total": CounterMetricFamily(
                f"{PREFIX}preempted_tokens", "Prompt and output tokens of requests at their preemption.", labels=labels
            ),
            "kv_offload_loaded_tokens_total": CounterMetricFamily(
                f"{PREFIX}kv_offload_loaded_tokens", "Tokens of resumed requests loaded from host memory, not recomputed.",
                labels=labels,
            ),
            "preempted_tokens_recomputed_total": CounterMetricFamily(
                f"{PREFIX}preempted_tokens_recomputed", "Tokens of resumed requests computed again.", labels=labels
            ),
        }
        for tier, replicas in self._replica_stats().items():
            for replica, stats in replicas.items():
                key = [tier, replica]
                for name, family in offload.items():
                    family.add_metric(key, getattr(stats, name))
                kv.add_metric(key, stats.kv_occupancy)
                running.add_metric(key, stats.num_running)
                waiting.add_metric(key, stats.num_waiting)
                stragglers.add_metric(key, stats.num_stragglers)
                preemptions.add_metric(key, stats.num_preemptions_total)
                cache_queries.add_metric(key, stats.prefix_cache_queries_total)
                cache_hits.add_metric(key, stats.prefix_cache_hits_total)
        yield from (kv, running, waiting, stragglers, preemptions, cache_queries, cache_hits)
        yield from offload.values()
