"""Scrape a Prometheus `/metrics` page during a run: KV occupancy and stragglers per tier over time.

The metric names are the one place the load test depends on the server's exporters; `THINKTIER_METRICS`
matches thinktier's, `RAY_LLM_METRICS` matches what Ray Serve LLM exports from vLLM through Ray's
metrics agent (no straggler metric there).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class MetricNames:
    kv_occupancy: str
    """Gauge, 0..1, one series per replica (each series of a tier counts as one replica)."""
    stragglers: str | None
    """Gauge, stragglers running now, per tier (and maybe replica)."""
    tier_label: str


THINKTIER_METRICS = MetricNames(
    kv_occupancy="thinktier_kv_cache_occupancy_ratio",
    stragglers="thinktier_stragglers",
    tier_label="tier",
)
RAY_LLM_METRICS = MetricNames(
    kv_occupancy="ray_vllm_kv_cache_usage_perc",
    stragglers=None,
    tier_label="model_name",
)


@dataclass(frozen=True)
class TierSample:
    """One scrape of one tier: KV occupancy averaged and maxed over its replicas, stragglers summed."""

    t_s: float
    tier: str
    kv_occupancy_mean: float | None
    kv_occupancy_max: float | None
    replicas: int
    stragglers: float | None


def parse_tiers(text: str, names: MetricNames, t_s: float) -> list[TierSample]:
    """The tier samples in one Prometheus text page."""
    kv: dict[str, list[float]] = {}
    stragglers: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            tier = sample.labels.get(names.tier_label, "")
            if sample.name == names.kv_occupancy:
                kv.setdefault(tier, []).append(sample.value)
            elif names.stragglers is not None and sample.name == names.stragglers:
                stragglers[tier] = stragglers.get(tier, 0.0) + sample.value
    samples = []
    for tier in sorted(set(kv) | set(stragglers)):
        values = kv.get(tier, [])
        samples.append(
            TierSample(
                t_s=t_s,
                tier=tier,
                kv_occupancy_mean=sum(values) / len(values) if values else None,
                kv_occupancy_max=max(values) if values else None,
                replicas=len(values),
                stragglers=stragglers.get(tier),
            )
        )
    return samples


@dataclass
class MetricsTimeline:
    samples: list[TierSample] = field(default_factory=list)
    scrapes: int = 0
    failures: int = 0
    last_error: str | None = None


async def scrape_until(
    client: httpx.AsyncClient, url: str, names: MetricNames, interval_s: float, run_t0: float, stop: asyncio.Event
) -> MetricsTimeline:
    """Scrape `url` every `interval_s` until `stop` is set; failures are counted, never raised."""
    timeline = MetricsTimeline()
    while True:
        t_s = time.perf_counter() - run_t0
        try:
            response = await client.get(url, timeout=max(interval_s, 2.0))
            response.raise_for_status()
            timeline.samples.extend(parse_tiers(response.text, names, t_s))
            timeline.scrapes += 1
        except (httpx.HTTPError, ValueError) as exc:
            timeline.failures += 1
            timeline.last_error = f"{type(exc).__name__}: {exc}"
        try:
            await asyncio.wait_for(stop.wait(), timeout=interval_s)
            return timeline
        except TimeoutError:
            continue
