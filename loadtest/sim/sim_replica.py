"""One simulated vLLM replica: continuous batching over a token-granular KV cache, FCFS or priority scheduling,
preemption with recompute, prefill charged per prompt token, decode steps timed by the hardware profile.

It is event-driven: between two events (a request reaches the end of its thinking or of its answer, the KV cache
fills, the caller's next time) every running sequence gains one token per step and the batch does not change, so
`advance_to` jumps over all those steps at once. Modelled on vLLM v1's scheduler: waiting requests are admitted in
policy order while the batch has room (max_num_seqs) and the KV cache holds their prompt; when a running sequence
cannot grow, the lowest-priority, latest-arrived one (FCFS: the latest admitted) is preempted and must recompute
its prompt and the tokens it had generated when it is admitted again. The cluster sets `device_slowdown` when other
engines share the replica's GPU. Not modelled: KV block granularity, prefix
cache hits, CPU offload, speculative decoding, several samples per request.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

import numpy as np

from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.loadtest.sim.sim_profile import HardwareProfile
from thinktier.policies.schema import Stragglers

THINK, ANSWER = 0, 1


@dataclass(eq=False)
class SimRequest:
    """One request through the simulation, with what it will generate and the times it reached."""

    index: int
    request_class: str
    prompt_id: str
    arrival_s: float
    prompt_tokens: int
    thinking_tokens: int
    answer_tokens: int
    priority: int = 0
    hard: bool = False
    tier: str | None = None
    replica: str | None = None
    degraded: str | None = None
    home: str | None = None
    """The request's own tier, when it ran on capacity `tier` lent (policy lending)."""
    shed: bool = False
    generated: int = 0
    preemptions: int = 0
    first_token_s: float | None = None
    first_answer_s: float | None = None
    end_s: float | None = None


@dataclass
class SimReplica:
    """A replica's batch and queue. Times are simulated seconds."""

    name: str
    profile: HardwareProfile
    kv_capacity: int
    max_num_seqs: int
    max_batched_tokens: int
    priority_scheduling: bool
    stragglers: Stragglers
    t: float = 0.0
    device_slowdown: float = 1.0
    """How much other engines on the same device stretch this one's device work (set by the cluster each tick)."""
    preemptions_total: int = 0
    waiting: list[tuple[tuple[float, float, int], SimRequest]] = field(default_factory=list)
    running: list[SimRequest] = field(default_factory=list)
    finished: list[SimRequest] = field(default_factory=list)
    _remaining: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _context: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _phase: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int8))
    _prompt: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    _arrival: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.float64))

    @property
    def load(self) -> int:
        return len(self.running) + len(self.waiting)

    def submit(self, request: SimRequest, now: float) -> None:
        self.advance_to(now)
        request.replica = self.name
        self._enqueue(request)

    def device_duty(self) -> float:
        """Share of the time this engine keeps its device busy at its current batch (0 when idle)."""
        return self.profile.device_duty(len(self.running), float(self._context.mean()) if self.running else 0.0)

    def stats(self) -> ReplicaStats:
        used = int(self._context.sum())
        long = ((self._context - self._prompt) > self.stragglers.thinking_tokens) | (
            self.t - self._arrival > self.stragglers.elapsed_s
        )
        stragglers = int(np.count_nonzero(long & (self._phase == THINK)))
        return ReplicaStats(
            kv_occupancy=min(1.0, used / self.kv_capacity) if self.kv_capacity else 1.0,
            num_running=len(self.running),
            num_waiting=len(self.waiting),
            num_stragglers=stragglers,
            num_long_running=sum(r.hard for r in self.running),
            num_borrowed=sum(r.home is not None for r in self.running) + sum(r.home is not None for _, r in self.waiting),
            num_preemptions_total=self.preemptions_total,
        )

    def advance_to(self, until: float) -> None:
        """Run every step that ends by `until`; the clock stays at the end of the last one (or moves to `until` when
        there is nothing to do)."""
        while True:
            self._admit()
            if not self.running:
                self.t = max(self.t, until)
                return
            batch = len(self.running)
            step = self.profile.step_s(batch, float(self._context.mean()), self.device_slowdown)
            steps_in_time = math.floor((until - self.t) / step + 1e-9)
            if steps_in_time <= 0:
                return
            room = (self.kv_capacity - int(self._context.sum())) // batch
            if room <= 0:
                self._preempt_one()
                continue
            steps = min(steps_in_time, int(self._remaining.min()), room)
            self._remaining -= steps
            self._context += steps
            self.t += steps * step
            self._finish_phases()

    # ---- internals ----------------------------------------------------------------------------------------------

    def _enqueue(self, request: SimRequest) -> None:
        key = (float(request.priority) if self.priority_scheduling else 0.0, request.arrival_s, request.index)
        heapq.heappush(self.waiting, (key, request))

    def _admit(self) -> None:
        """Admit waiting requests in order while the batch and the KV cache have room; charge their prefill."""
        used = int(self._context.sum())
        prefill = 0
        admitted: list[SimRequest] = []
        while self.waiting and len(self.running) + len(admitted) < self.max_num_seqs:
            request = self.waiting[0][1]
            context = request.prompt_tokens + request.generated
            if used + context + len(self.running) + len(admitted) + 1 > self.kv_capacity:
                break
            if admitted and prefill + context > self.max_batched_tokens:
                break
            heapq.heappop(self.waiting)
            admitted.append(request)
            used += context
            prefill += context
        if not admitted:
            return
        self.t += prefill * self.profile.prefill_s_per_token * self.device_slowdown
        first_step_end = self.t + self.profile.step_s(len(self.running) + len(admitted), 0.0, self.device_slowdown)
        for request in admitted:
            if request.first_token_s is None:
                request.first_token_s = first_step_end
            thinking_left = request.thinking_tokens - request.generated
            phase, remaining = (THINK, thinking_left) if thinking_left > 0 else (ANSWER, self._answer_left(request))
            if phase == ANSWER and request.first_answer_s is None and request.answer_tokens > 0:
                request.first_answer_s = first_step_end
            self.running.append(request)
            self._remaining = np.append(self._remaining, max(remaining, 1))
            self._context = np.append(self._context, request.prompt_tokens + request.generated)
            self._phase = np.append(self._phase, phase)
            self._prompt = np.append(self._prompt, request.prompt_tokens)
            self._arrival = np.append(self._arrival, request.arrival_s)

    @staticmethod
    def _answer_left(request: SimRequest) -> int:
        return request.thinking_tokens + request.answer_tokens - request.generated

    def _finish_phases(self) -> None:
        done = np.flatnonzero(self._remaining <= 0)
        if not len(done):
            return
        keep = np.ones(len(self.running), dtype=bool)
        for i in done:
            request = self.running[i]
            request.generated = int(self._context[i] - self._prompt[i])
            if self._phase[i] == THINK and request.answer_tokens > 0:
                request.first_answer_s = self.t
                self._phase[i] = ANSWER
                self._remaining[i] = self._answer_left(request)
                continue
            if request.first_answer_s is None and request.answer_tokens > 0:
                request.first_answer_s = self.t
            request.end_s = self.t
            self.finished.append(request)
            keep[i] = False
        self._keep(keep)

    def _preempt_one(self) -> None:
        """vLLM v1: the lowest-priority, latest-arrived running request (FCFS: the latest admitted) gives back its KV."""
        if self.priority_scheduling:
            victim = max(range(len(self.running)), key=lambda i: (self.running[i].priority, self.running[i].arrival_s))
        else:
            victim = len(self.running) - 1
        request = self.running[victim]
        request.generated = int(self._context[victim] - self._prompt[victim])
        request.preemptions += 1
        self.preemptions_total += 1
        keep = np.ones(len(self.running), dtype=bool)
        keep[victim] = False
        self._keep(keep)
        self._enqueue(request)

    def _keep(self, keep: np.ndarray) -> None:
        self.running = [r for r, k in zip(self.running, keep, strict=True) if k]
        self._remaining = self._remaining[keep]
        self._context = self._context[keep]
        self._phase = self._phase[keep]
        self._prompt = self._prompt[keep]
        self._arrival = self._arrival[keep]
