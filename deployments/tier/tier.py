"""Ray Serve deployment of one tier: a TierEngine per replica, reporting its load."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import TYPE_CHECKING

from ray import serve
from ray.serve.handle import DeploymentHandle

from thinktier.deployments.serve_options import DRAIN_POLL_S, ServeOptions
from thinktier.deployments.tier.coalesce import coalesce
from thinktier.deployments.tier.engine import GIB, TierEngine, engine_env
from thinktier.deployments.tier.protocol import HEARTBEAT_S, EngineDead, TierChunk, TierRequest, collect
from thinktier.deployments.tier.queued import while_queued
from thinktier.deployments.tier.self_consistency import Embed
from thinktier.policies.schema import Policy, Tier

if TYPE_CHECKING:
    from thinktier.deployments.classifier.classifier import DifficultyClassifier
    from thinktier.deployments.request.load_board import LoadBoard


LEAVE_BOARD_INTERVALS = 3
"""Stats intervals between a dead engine's replica leaving the load board and failing its health check: the Ingresses
read the board every interval."""


def tier_deployment_name(tier: str) -> str:
    return f"tier-{tier}"


def _embedder(classifier: DeploymentHandle[DifficultyClassifier]) -> Embed:
    async def embed(texts: list[str]) -> list[list[float]]:
        embeddings: list[list[float]] = await classifier.embed.remote(texts)
        return embeddings

    return embed


class TierReplica:
    """One vLLM engine; streams TierChunks (coalesced, at most `stream_interval_s` apart) and pushes ReplicaStats
    to the load board every interval."""

    @classmethod
    def deployment_options(cls, policy: Policy, name: str) -> ServeOptions:
        """Tier `name`'s replicas: the Ray resources of its pool, its engine's environment, its concurrency, health
        checks and drain (server.drain_timeout_s). How many replicas run (the autoscaler) and which one takes a request
        (the request router) are the cluster's to add."""
        tier = policy.tiers[name]
        actor: ServeOptions = {
            "num_cpus": tier.pool.num_cpus,
            "memory": int(tier.pool.memory_gib * GIB),
            "runtime_env": {"env_vars": engine_env(tier)},
        }
        if tier.pool.accelerator == "gpu":
            share = tier.pool.gpu_fraction  # below 1 only with tensor_parallel_size 1 (the policy checks)
            actor["num_gpus"] = tier.engine.tensor_parallel_size if share == 1 else share
            if tier.pool.accelerator_type:
                actor["accelerator_type"] = tier.pool.accelerator_type
        return {
            "name": tier_deployment_name(name),
            "ray_actor_options": actor,
            "max_ongoing_requests": tier.engine.max_num_seqs * 4,
            "graceful_shutdown_timeout_s": policy.server.drain_timeout_s,
            "graceful_shutdown_wait_loop_s": DRAIN_POLL_S,
            "health_check_period_s": 5,  # check_health: a dead engine is replaced within seconds
            "health_check_timeout_s": 120,
        }

    async def __init__(  # type: ignore[misc]  # Serve awaits an async constructor; mypy wants __init__ to return None
        self, name: str, tier: Tier, board: DeploymentHandle[LoadBoard], stream_interval_s: float,
        classifier: DeploymentHandle[DifficultyClassifier] | None = None,
    ) -> None:
        """`classifier`: the difficulty classifier, whose embedder compares self-consistency samples' free-text
        answers (without it they compare as text)."""
        self.name = name
        embed = None if classifier is None else _embedder(classifier)
        self.engine = TierEngine(name, tier, embed=embed)
        self._stream_interval_s = stream_interval_s
        self._board = board
        self._interval_s = tier.autoscaling.metrics_interval_s
        self._left_board_at: float | None = None
        """time.monotonic() when the replica, its engine dead, left the load board."""
        try:
            self._replica = serve.get_replica_context().replica_id.unique_id
            await self.engine.warmup()  # the replica counts as started (and the tier as ready) once it has decoded
        except BaseException:
            self.engine.shutdown()  # a replica that fails to start leaves no engine process (nor its memory) behind
            del self.engine
            raise
        self._reporter = asyncio.get_running_loop().create_task(self._report_forever())

    async def _report_forever(self) -> None:
        """Stats to the board every interval (each report within one interval) while the engine lives. A dead engine's
        last numbers are not reported again: the replica leaves the board at once, so the Ingress stops routing to it
        and /readyz counts it out until Serve has replaced it (check_health)."""
        while not self._engine_dead():
            with contextlib.suppress(Exception):  # the board may be restarting; the next report catches up
                await asyncio.wait_for(self._board.report.remote(self.name, self._replica, self.engine.stats()),
                                       self._interval_s)
            await asyncio.sleep(self._interval_s)
        with contextlib.suppress(Exception):  # else the board drops it once its last report is stale
            await asyncio.wait_for(self._board.forget.remote(self.name, self._replica), self._interval_s)
        self._left_board_at = time.monotonic()

    def _engine_dead(self) -> bool:
        """vLLM's liveness: its engine core process is gone or its output loop failed."""
        return self.engine.engine.errored

    async def check_health(self) -> None:
        """Serve calls this every health_check_period_s; raising marks the replica unhealthy and Serve replaces it.
        A dead engine's replica first leaves the load board and stays a few stats intervals more, so that the Ingresses
        have read the board without it before Serve takes it out: a request that Serve routed to a tier with no replica
        would wait for the new one, where the Ingress, knowing the tier down, fails it over to the chat tier."""
        left = self._left_board_at
        if left is not None and time.monotonic() - left >= LEAVE_BOARD_INTERVALS * self._interval_s:
            raise RuntimeError(f"tier {self.name!r}: the vLLM engine of replica {self._replica} is dead")

    async def generate(self, request: TierRequest) -> AsyncIterator[TierChunk]:
        """The request's chunks, coalesced; while it waits in a busy engine's queue, heartbeats (deployments/tier/queued.py)."""
        first = True
        queued = while_queued(self.engine.generate(request), lambda: self.engine.producing(HEARTBEAT_S), HEARTBEAT_S)
        with self._dead_engine_named():
            async for chunk in coalesce(queued, self._stream_interval_s):
                if first:
                    chunk.replica, first = self._replica, False
                yield chunk

    async def generate_all(self, request: TierRequest) -> TierChunk:
        """The whole completion in one reply (non-streaming clients: one RPC instead of one per step)."""
        with self._dead_engine_named():
            whole = await collect(self.engine.generate(request))
        whole.replica = self._replica
        return whole

    @contextlib.contextmanager
    def _dead_engine_named(self) -> Iterator[None]:
        """A request that fails because the engine is dead fails with EngineDead, which names this replica."""
        try:
            yield
        except Exception as exc:
            if self._engine_dead():
                raise EngineDead(self._replica) from exc
            raise

    async def record_autoscaling_stats(self) -> dict[str, float]:
        """Async, so Serve runs it on the replica's event loop, between the steps of the requests that add and remove
        the engine's running entries: Ray Serve 2.60 runs a plain `def` hook in a thread pool, concurrently with them
        ("dictionary changed size during iteration" lost samples under load)."""
        return self.engine.stats().as_metrics()

    async def record_routing_stats(self) -> dict[str, float]:
        """Async for the same reason as record_autoscaling_stats."""
        return self.engine.stats().as_metrics()

    def __del__(self) -> None:
        if (reporter := getattr(self, "_reporter", None)) is not None:  # None: the replica never finished starting
            reporter.cancel()
        if (engine := getattr(self, "engine", None)) is not None:
            engine.shutdown()
