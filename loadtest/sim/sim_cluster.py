"""A simulated thinktier cluster that runs the project's real decision code on simulated time.

Per arrival: the real `thinktier.deployments.request.routing.decide` (tier, effort, budgets, priority, degradation or
429) on the tiers'
last reported load, then the real `thinktier.cluster.request_router.score_replica` picks the replica (the lowest score, as
`KVAwareRequestRouter` does), with the queue length the router itself tracks. Every `tick_s`: every replica reports
its stats (as replicas push them every `metrics_interval_s`), and each tier's autoscaler decides: the real
`thinktier.cluster.autoscaling.decide_replicas`, or, for a tier with `autoscaling.signal: ongoing_requests`, Ray Serve's
default policy (`ray_default_wanted`, then `ray_delayed`). Tiers that share a pool (`shared_capacity`) are then fitted
into its total by the real `thinktier.cluster.shared_capacity.share_pool`, as the application-level policy does. A new
replica serves `startup_s` after it is asked for; a replica scaled down takes no new requests and leaves once its last
request ends (Ray Serve drains it). Replicas that ask for part of a GPU (`pool.gpu_fraction`) are packed onto GPUs
first-fit, as Ray does, and engines on one GPU slow each other's device work every tick (`device_slowdowns`).
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from thinktier.cluster.autoscaling import ScalerState, TierSample, decide_replicas
from thinktier.cluster.request_router import score_replica
from thinktier.cluster.shared_capacity import PoolTier, give_back_delay_s, share_pool
from thinktier.deployments.request.decision import Decision, DifficultyScore, RoutingRequest
from thinktier.deployments.request.routing import Overloaded, TierLoad, decide
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.loadtest.sim.sim_profile import HardwareProfile
from thinktier.loadtest.sim.sim_replica import SimReplica, SimRequest
from thinktier.loadtest.sim.sim_workload import Arrival, Lengths
from thinktier.policies.schema import Autoscaling, Policy, Replicas, RouterWeights, SharedCapacity, Tier, replica_devices

DecideFn = Callable[[Policy, RoutingRequest, DifficultyScore | None, dict[str, TierLoad]], Decision]
ScoreFn = Callable[[ReplicaStats, int, bool, RouterWeights], float]
DecideReplicasFn = Callable[[ScalerState, TierSample, Autoscaling, Replicas, float], tuple[int, ScalerState]]


class SimHooks(TypedDict, total=False):
    """Stand-ins for the real decision functions (tests swap them)."""

    decide_fn: DecideFn
    score_fn: ScoreFn
    decide_replicas_fn: DecideReplicasFn


@dataclass(frozen=True)
class SimSettings:
    tick_s: float = 1.0
    """How often replicas report and autoscalers decide."""
    startup_s: float = 150.0
    """From a replica being asked for to it serving (the GPU runs: 90-160 s)."""
    drain_s: float = 600.0
    """How long after the last arrival unfinished requests may still finish."""
    autoscale: bool = True
    """False: every tier keeps its initial replica count."""
    replicas: dict[str, int] = field(default_factory=dict)
    """Initial (and, without autoscaling, fixed) replicas per tier; the policy's initial/min when absent."""


@dataclass
class Device:
    """One GPU and the engines Ray placed on it (fractional GPUs: `pool.gpu_fraction` below 1)."""

    free: float = 1.0
    replicas: list[SimReplica] = field(default_factory=list)


def device_slowdowns(replicas: Sequence[SimReplica]) -> list[float]:
    """Engines sharing one device time-slice it: while one computes, each other engine is computing for the share of
    its time its batch keeps the device busy, and both go at half speed then. So an engine's device work stretches by
    1 + the others' duty. The CPU-side serving overhead is each engine's own (one process per engine)."""
    duties = [r.device_duty() for r in replicas]
    total = sum(duties)
    return [1.0 + total - duty for duty in duties]


@dataclass
class Pending:
    """A replica asked for and not serving yet."""

    ready_s: float
    replica: SimReplica


@dataclass
class SimTier:
    name: str
    config: Tier
    profile: HardwareProfile
    kv_tokens: int
    replicas: list[SimReplica] = field(default_factory=list)
    draining: list[SimReplica] = field(default_factory=list)
    pending: list[Pending] = field(default_factory=list)
    target: int = 0
    state: ScalerState = field(default_factory=ScalerState)
    give_back_since: float | None = None
    """When this tier, above its share of a shared pool, started being asked to give replicas back."""
    above_since: float | None = None
    below_since: float | None = None
    reports: dict[str, ReplicaStats] = field(default_factory=dict)
    routed_since_report: dict[str, int] = field(default_factory=dict)
    ranking: dict[bool, list[tuple[float, float, int, SimReplica]]] = field(default_factory=dict)
    """Per hardness, a heap of (score, tie-break, requests routed to the replica since the report when scored,
    replica): the router's ranking, kept current cheaply."""
    serial: int = 0
    replica_seconds: float = 0.0

    def new_replica(self) -> SimReplica:
        self.serial += 1
        engine = self.config.engine
        return SimReplica(
            name=f"{self.name}-{self.serial}",
            profile=self.profile,
            kv_capacity=self.kv_tokens,
            max_num_seqs=engine.max_num_seqs,
            max_batched_tokens=engine.max_num_batched_tokens or 8192,
            priority_scheduling=engine.scheduling_policy == "priority",
            stragglers=self.config.stragglers,
        )


@dataclass(frozen=True)
class TimelinePoint:
    t_s: float
    tier: str
    replicas: int
    """Replicas serving (draining ones included)."""
    target: int
    kv_mean: float
    kv_max: float
    running: int
    waiting: int
    stragglers: int
    preemptions_total: int


@dataclass
class SimResult:
    requests: list[SimRequest]
    timeline: list[TimelinePoint]
    replica_seconds: dict[str, float]
    end_s: float


def ray_default_wanted(ongoing: float, targets: Autoscaling, bounds: Replicas) -> int:
    """Ray Serve's default request-count policy (`replica_queue_length_autoscaling_policy`, smoothing factors 1):
    ceil(ongoing / target_ongoing_requests) within bounds."""
    return min(max(math.ceil(ongoing / targets.target_ongoing_requests - 1e-9), bounds.min), bounds.max)


def ray_delayed(tier: SimTier, wanted: int, targets: Autoscaling, now: float) -> int:
    """A count applied once the wish for it has held for the up/down delay, as Ray Serve applies the delays of a
    deployment's `autoscaling_config` (the tier's own with `signal: ongoing_requests`)."""
    if wanted > tier.target:
        tier.below_since = None
        tier.above_since = tier.above_since if tier.above_since is not None else now
        return wanted if now - tier.above_since >= targets.upscale_delay_s else tier.target
    if wanted < tier.target:
        tier.above_since = None
        tier.below_since = tier.below_since if tier.below_since is not None else now
        return wanted if now - tier.below_since >= targets.downscale_delay_s else tier.target
    tier.above_since = tier.below_since = None
    return tier.target


class Simulation:
    def __init__(
        self,
        policy: Policy,
        profiles: dict[str, HardwareProfile],
        settings: SimSettings,
        decide_fn: DecideFn = decide,
        score_fn: ScoreFn = score_replica,
        decide_replicas_fn: DecideReplicasFn = decide_replicas,
        seed: int = 0,
    ) -> None:
        self.policy = policy
        self.settings = settings
        self.decide = decide_fn
        self.score = score_fn
        self.decide_replicas = decide_replicas_fn
        self.tiers: dict[str, SimTier] = {}
        self.devices: list[Device] = []
        self.placed: dict[str, Device] = {}
        for name, tier in policy.tiers.items():
            profile = profiles[name]
            sim = SimTier(name, tier, profile, profile.kv_tokens(tier))
            count = settings.replicas.get(name, tier.replicas.initial if tier.replicas.initial is not None else tier.replicas.min)
            sim.replicas = [self.start_replica(sim) for _ in range(count)]
            sim.target = count
            self.tiers[name] = sim
        self.pooled = {name for pool in policy.shared_capacity for name in pool.tiers}
        self.requests: list[SimRequest] = []
        self.timeline: list[TimelinePoint] = []
        self.rng = random.Random(seed)

    # ---- devices ---------------------------------------------------------------------------------------------

    def start_replica(self, tier: SimTier) -> SimReplica:
        """A new replica of `tier`; one that asks for part of a GPU is placed on the first GPU with room for it, as
        Ray packs fractional GPUs (a whole-GPU replica shares with nothing)."""
        replica = tier.new_replica()
        pool = tier.config.pool
        if pool.accelerator == "gpu" and pool.gpu_fraction < 1:
            device = next((d for d in self.devices if d.free >= pool.gpu_fraction - 1e-9), None)
            if device is None:
                device = Device()
                self.devices.append(device)
            device.free -= pool.gpu_fraction
            device.replicas.append(replica)
            self.placed[replica.name] = device
        return replica

    def stop_replica(self, tier: SimTier, replica: SimReplica) -> None:
        device = self.placed.pop(replica.name, None)
        if device is not None:
            device.free += tier.config.pool.gpu_fraction
            device.replicas.remove(replica)

    def share_devices(self) -> None:
        for device in self.devices:
            for replica, slowdown in zip(device.replicas, device_slowdowns(device.replicas), strict=True):
                replica.device_slowdown = slowdown

    # ---- one request -----------------------------------------------------------------------------------------

    def route(self, arrival: Arrival, difficulty: DifficultyScore | None, lengths: Lengths) -> SimRequest:
        thinking, answer = lengths.draw(arrival.prompt.request_class)
        request = SimRequest(
            arrival.index, arrival.prompt.request_class, arrival.prompt.id, arrival.at_s, arrival.prompt_tokens, 0, 0
        )
        self.requests.append(request)
        loads = {name: TierLoad(tuple(t.reports.values())) for name, t in self.tiers.items()}
        try:
            decision = self.decide(self.policy, RoutingRequest(prompt=arrival.prompt.text, arrival_s=arrival.at_s),
                                   difficulty, loads)
        except Overloaded:
            request.shed = True
            return request
        tier = self.tiers[decision.tier]
        request.tier, request.degraded, request.home = decision.tier, decision.degraded, decision.home
        request.priority, request.hard = decision.priority, decision.difficulty == "hard"
        request.thinking_tokens = min(thinking, decision.thinking_tokens)
        request.answer_tokens = min(answer, decision.answer_tokens)
        replica = self.pick_replica(tier, request.hard)
        if replica is None:  # a tier scaled to zero: Serve would hold the request until a replica starts; not modelled
            request.shed = True
            return request
        replica.submit(request, arrival.at_s)
        return request

    def replica_score(self, tier: SimTier, replica: SimReplica, hard: bool) -> float:
        """The real router's inputs: the last reported stats, and the queue length it knows (reported running and
        waiting plus what it sent since)."""
        stats = tier.reports.get(replica.name, ReplicaStats())
        queue = stats.num_running + stats.num_waiting + tier.routed_since_report.get(replica.name, 0)
        return self.score(stats, queue, hard, tier.config.router_weights)

    def rank(self, tier: SimTier) -> None:
        """Score every replica afresh (after a report). Ties are broken at random, as the router's shuffle does."""
        for hard in (False, True):
            heap = [(self.replica_score(tier, r, hard), self.rng.random(), 0, r) for r in tier.replicas]
            heapq.heapify(heap)
            tier.ranking[hard] = heap

    def pick_replica(self, tier: SimTier, hard: bool) -> SimReplica | None:
        """The lowest score, as `KVAwareRequestRouter` ranks; only the replica that just got a request changes score
        between reports, so stale heap entries are rescored when they reach the top."""
        heap = tier.ranking.get(hard)
        if not heap:
            return None
        routed = tier.routed_since_report
        while heap[0][2] != routed.get(heap[0][3].name, 0):
            _, tie, _, replica = heap[0]
            heapq.heapreplace(heap, (self.replica_score(tier, replica, hard), tie, routed.get(replica.name, 0), replica))
        replica = heap[0][3]
        routed[replica.name] = routed.get(replica.name, 0) + 1
        heapq.heapreplace(heap, (self.replica_score(tier, replica, hard), heap[0][1], routed[replica.name], replica))
        return replica

    # ---- every tick ------------------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        for tier in self.tiers.values():
            serving = tier.replicas + tier.draining
            for replica in serving:
                replica.advance_to(now)
            for replica in tier.draining:
                if not replica.load:
                    self.stop_replica(tier, replica)
            tier.draining = [r for r in tier.draining if r.load]
            ready = [p for p in tier.pending if p.ready_s <= now]
            tier.pending = [p for p in tier.pending if p.ready_s > now]
            tier.replicas += [p.replica for p in ready]
            tier.reports = {r.name: r.stats() for r in tier.replicas}
            tier.routed_since_report = {}
            self.rank(tier)
            tier.replica_seconds += self.settings.tick_s * (len(tier.replicas) + len(tier.draining) + len(tier.pending))
            stats = list(tier.reports.values())
            kv = [s.kv_occupancy for s in stats]
            self.timeline.append(TimelinePoint(
                t_s=now, tier=tier.name, replicas=len(tier.replicas) + len(tier.draining), target=tier.target,
                kv_mean=sum(kv) / len(kv) if kv else 0.0, kv_max=max(kv, default=0.0),
                running=sum(s.num_running for s in stats), waiting=sum(s.num_waiting for s in stats),
                stragglers=sum(s.num_stragglers for s in stats),
                preemptions_total=sum(r.preemptions_total for r in serving),
            ))
            if self.settings.autoscale and tier.name not in self.pooled:
                self.autoscale(tier, now)
        if self.settings.autoscale:
            for pool in self.policy.shared_capacity:
                self.autoscale_pool(pool, now)
        self.share_devices()

    def own_wanted(self, tier: SimTier, now: float) -> int:
        """The tier's own autoscaling decision: `decide_replicas` (its delays inside), or Ray Serve's default policy
        before Ray applies the delays (`ray_delayed`)."""
        config = tier.config
        ongoing = float(sum(s.num_running + s.num_waiting for s in tier.reports.values()))
        if config.autoscaling.signal == "ongoing_requests":
            return ray_default_wanted(ongoing, config.autoscaling, config.replicas)
        sample = TierSample(tuple(tier.reports.values()), ongoing, tier.target, len(tier.replicas))
        wanted, tier.state = self.decide_replicas(tier.state, sample, config.autoscaling, config.replicas, now)
        return wanted

    def apply(self, tier: SimTier, wanted: int, now: float) -> None:
        """Ray's delays on the decision (tiers with `signal: ongoing_requests`), then the replicas to match it."""
        if tier.config.autoscaling.signal == "ongoing_requests":
            wanted = ray_delayed(tier, wanted, tier.config.autoscaling, now)
        while tier.target < wanted:
            tier.pending.append(Pending(now + self.settings.startup_s, self.start_replica(tier)))
            tier.target += 1
        while tier.target > wanted:
            tier.target -= 1
            if tier.pending:
                self.stop_replica(tier, tier.pending.pop().replica)
                continue
            idlest = min(tier.replicas, key=lambda r: r.load)
            tier.replicas.remove(idlest)
            tier.draining.append(idlest)

    def autoscale(self, tier: SimTier, now: float) -> None:
        self.apply(tier, self.own_wanted(tier, now), now)

    def autoscale_pool(self, pool: SharedCapacity, now: float) -> None:
        """The tiers of a shared pool: each one's own decision, fitted into the pool's total by the real
        `share_pool`, as the application-level policy (`SharedCapacityPolicy`) does in Ray Serve."""
        tiers = [self.tiers[name] for name in pool.tiers]
        wishes = [
            PoolTier(t.name, t.target, self.own_wanted(t, now), t.config.replicas.min, replica_devices(t.config),
                     give_back_delay_s(t.config), t.give_back_since)
            for t in tiers
        ]
        decided = share_pool(wishes, pool.total, now)
        for t in tiers:
            t.give_back_since = decided[t.name].give_back_since
            self.apply(t, decided[t.name].replicas, now)

    # ---- the whole run ---------------------------------------------------------------------------------------

    def run(self, arrivals: Sequence[Arrival], scores: dict[str, DifficultyScore], lengths: Lengths) -> SimResult:
        classifier_on = self.policy.routing.classifier.enabled
        # (time, 0 for a tick / 1 for an arrival, order, arrival): at equal times a tick reports first
        events: list[tuple[float, int, int, Arrival | None]] = [(a.at_s, 1, a.index, a) for a in arrivals]
        last_arrival = max((a.at_s for a in arrivals), default=0.0)
        ticks = math.ceil((last_arrival + self.settings.drain_s) / self.settings.tick_s)
        events += [(k * self.settings.tick_s, 0, k, None) for k in range(ticks + 1)]
        heapq.heapify(events)
        now = 0.0
        while events:
            now, _, _, arrival = heapq.heappop(events)
            if arrival is None:
                self.tick(now)
                if now > last_arrival and all(r.end_s is not None or r.shed for r in self.requests):
                    break
                continue
            difficulty = scores.get(arrival.prompt.id) if classifier_on else None
            self.route(arrival, difficulty, lengths)
        return SimResult(self.requests, self.timeline, {n: t.replica_seconds for n, t in self.tiers.items()}, now)
