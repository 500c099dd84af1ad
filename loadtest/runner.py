"""Drive a workload against one endpoint: send on schedule (open loop) or batch by batch (closed loop),
scrape `/metrics` alongside, and show progress."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import httpx
from tqdm import tqdm

from thinktier.loadtest.client import RequestOptions, RequestResult, send
from thinktier.loadtest.metrics_scraper import THINKTIER_METRICS, MetricNames, MetricsTimeline, scrape_until
from thinktier.loadtest.workload import WorkItem


@dataclass(frozen=True)
class Target:
    """An OpenAI-compatible endpoint and where its Prometheus metrics are."""

    url: str
    """Base URL, e.g. http://127.0.0.1:8000 (the API is under /v1)."""
    options: RequestOptions = field(default_factory=RequestOptions)
    metrics_url: str | None = None
    """Prometheus page to scrape; `{url}/metrics` when None."""
    metric_names: MetricNames = THINKTIER_METRICS
    per_prompt: Mapping[str, RequestOptions] = field(default_factory=dict)
    """Options of particular prompts (by prompt id) in place of `options`: a peer given thinktier's per-class budgets."""

    def options_for(self, item: WorkItem) -> RequestOptions:
        return self.per_prompt.get(item.prompt.id, self.options)

    @property
    def completions_url(self) -> str:
        return self.url.rstrip("/") + "/v1/chat/completions"

    @property
    def scrape_url(self) -> str:
        return self.metrics_url or self.url.rstrip("/") + "/metrics"


@dataclass(frozen=True)
class RunSettings:
    request_timeout_s: float = 600.0
    scrape_interval_s: float = 1.0
    progress: bool = True


@dataclass
class RunRecord:
    """What one run measured: each request, the metrics timeline, and the wall time it took."""

    label: str
    mode: str
    offered_rate: float | None
    shape: float | None
    duration_s: float
    results: list[RequestResult]
    timeline: MetricsTimeline
    window_s: float | None = None
    """The arrival window (an open loop's planned duration), which goodput is divided by; None for a closed loop,
    whose whole run is its window."""


class _Progress:
    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.bar = tqdm(total=total, desc=label, unit="req", file=sys.stderr, disable=not enabled, dynamic_ncols=True)
        self.in_flight = 0
        self.shed = 0
        self.errors = 0

    def started(self) -> None:
        self.in_flight += 1
        self._show()

    def finished(self, result: RequestResult) -> None:
        self.in_flight -= 1
        self.shed += result.shed
        self.errors += (not result.ok) and not result.shed
        self.bar.update(1)
        self._show()

    def _show(self) -> None:
        self.bar.set_postfix(in_flight=self.in_flight, shed_429=self.shed, errors=self.errors, refresh=False)

    def close(self) -> None:
        self.bar.close()


class _Session:
    """The shared state of one run: HTTP client, clock, progress, scraper."""

    def __init__(self, target: Target, settings: RunSettings, total: int, label: str) -> None:
        self.target = target
        self.settings = settings
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=64)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(settings.request_timeout_s), limits=limits)
        self.progress = _Progress(total, label, settings.progress)
        self.t0 = time.perf_counter()
        self.stop = asyncio.Event()
        self.scraper = asyncio.create_task(
            scrape_until(self.client, target.scrape_url, target.metric_names, settings.scrape_interval_s, self.t0, self.stop)
        )

    async def one(self, item: WorkItem) -> RequestResult:
        self.progress.started()
        start_s = time.perf_counter() - self.t0
        try:
            result = await asyncio.wait_for(
                send(self.client, self.target.completions_url, item, self.target.options_for(item), self.t0),
                timeout=self.settings.request_timeout_s,
            )
        except TimeoutError:
            result = RequestResult.of(item, start_s)
            result.error = f"no complete response within {self.settings.request_timeout_s:g} s (--request-timeout)"
        self.progress.finished(result)
        return result

    async def finish(self) -> tuple[float, MetricsTimeline]:
        duration = time.perf_counter() - self.t0
        self.stop.set()
        timeline = await self.scraper
        await self.client.aclose()
        self.progress.close()
        return duration, timeline


async def run_open_loop(
    target: Target, items: Sequence[WorkItem], settings: RunSettings, label: str, rate: float, shape: float,
    window_s: float,
) -> RunRecord:
    """Send each item at its `send_at_s` (all within `window_s`), whether or not earlier ones have finished."""
    session = _Session(target, settings, len(items), label)

    async def at_time(item: WorkItem) -> RequestResult:
        await asyncio.sleep(max(0.0, session.t0 + item.send_at_s - time.perf_counter()))
        return await session.one(item)

    results = await asyncio.gather(*(at_time(item) for item in items))
    duration, timeline = await session.finish()
    return RunRecord(label, "open", rate, shape, duration, list(results), timeline, window_s)


async def run_closed_loop(target: Target, batches: Sequence[Sequence[WorkItem]], settings: RunSettings, label: str) -> RunRecord:
    """Send each batch at once and wait for its slowest request before the next."""
    session = _Session(target, settings, sum(len(b) for b in batches), label)
    results: list[RequestResult] = []
    for batch in batches:
        results.extend(await asyncio.gather(*(session.one(item) for item in batch)))
    duration, timeline = await session.finish()
    return RunRecord(label, "closed", None, None, duration, results, timeline)
