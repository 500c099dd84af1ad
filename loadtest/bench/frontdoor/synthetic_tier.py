"""Benchmark fixture, not production code: a tier deployment that streams synthetic tokens instead of decoding.

It answers the calls deployments/tier/tier.py's TierReplica answers (`generate` streamed, `generate_all`, the
autoscaling and routing stats) and reports to the LoadBoard the same way, so the real Ingress routes to it,
frames its chunks and turns ready, while no model is loaded. Tokens come from loadtest/bench/frontdoor/synthetic_stream.py
at `tokens_per_s` per stream, coalesced with the policy's stream interval.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from ray import serve
from ray.serve.handle import DeploymentHandle

from thinktier.deployments.tier.protocol import TierChunk, TierRequest, collect
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.loadtest.bench.frontdoor.synthetic_stream import synthetic_chunks, tier_stream
from thinktier.policies.schema import Tier

if TYPE_CHECKING:
    from thinktier.deployments.request.load_board import LoadBoard


class SyntheticTier:
    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor; mypy wants __init__ to return None
        self, name: str, tier: Tier, board: DeploymentHandle[LoadBoard], stream_interval_s: float, tokens_per_s: float
    ) -> None:
        self.name = name
        self._board = board
        self._stream_interval_s = stream_interval_s
        self._tokens_per_s = tokens_per_s
        self._replica = serve.get_replica_context().replica_id.unique_id
        self._interval_s = tier.autoscaling.metrics_interval_s
        self._running = 0
        self._reporter = asyncio.get_running_loop().create_task(self._report_forever())

    async def _report_forever(self) -> None:
        while True:
            with contextlib.suppress(Exception):  # the board may be restarting; the next report catches up
                await self._board.report.remote(self.name, self._replica, self.stats())
            await asyncio.sleep(self._interval_s)

    def stats(self) -> ReplicaStats:
        return ReplicaStats(num_running=self._running)

    async def generate(self, request: TierRequest) -> AsyncIterator[TierChunk]:
        self._running += 1
        try:
            async for chunk in tier_stream(request, self._tokens_per_s, self._stream_interval_s, self._replica):
                yield chunk
        finally:
            self._running -= 1

    async def generate_all(self, request: TierRequest) -> TierChunk:
        whole = await collect(synthetic_chunks(request, self._tokens_per_s))
        whole.replica = self._replica
        return whole

    def record_autoscaling_stats(self) -> dict[str, float]:
        return self.stats().as_metrics()

    def record_routing_stats(self) -> dict[str, float]:
        return self.stats().as_metrics()

    def __del__(self) -> None:
        self._reporter.cancel()
