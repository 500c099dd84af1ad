"""Which blocks to copy out when vLLM preempts a request, and where to copy them back when it resumes.

Runs in vLLM's scheduler, one step at a time. vLLM frees a preempted request's blocks at once and may hand them to
another request in the same step, so the planner keeps every running request's block table and how many of its
tokens have KV (it sees these only in the scheduler's output of each step), and at the step of the preemption plans a
copy of the request's full blocks into free host slots; the worker makes the copy before that step's forward pass
writes anything. When the request is scheduled again, vLLM asks how many of its tokens the connector can supply beyond
its own prefix cache, allocates blocks for them, and the planner plans the copy back.

Host space holds only requests that are still alive: a request's slots are freed when it resumes (one step after
its load, so no store of the same step can overwrite them) or finishes, and a finished request is never stored (its
thinking section will not be sent again). A preemption that finds too few free slots stores the blocks that fit (the
start of the request); the rest is recomputed, as without the connector. Free slots are a stack that hands them out
in ascending runs and takes a freed request's run back whole, so a request's blocks mostly land in a few runs of
consecutive slots: the copier moves each run in one DMA.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

STORE_BYTES = "vllm:kv_offload_store_bytes"
"""Bytes copied from the engine's KV cache to host memory, under the name vLLM's own offloading connector reports."""
LOAD_BYTES = "vllm:kv_offload_load_bytes"
"""Bytes copied back, likewise."""
COUNTER_PREFIX = "thinktier:"
"""Each `OffloadCounters` field is reported under this prefix and its name (the connector writes, the replica reads)."""


@dataclass(frozen=True)
class BlockCopy:
    """Blocks moved between the engine's KV cache and the host pool, pairwise."""

    gpu_blocks: tuple[int, ...]
    cpu_slots: tuple[int, ...]


@dataclass(frozen=True)
class StepCopies:
    """One scheduler step's copies: stores before the step's forward pass, then loads."""

    stores: tuple[BlockCopy, ...] = ()
    loads: tuple[BlockCopy, ...] = ()


@dataclass(frozen=True)
class Scheduled:
    """A request the scheduler scheduled this step, as its output tells it."""

    request_id: str
    new_blocks: list[int] | None
    """Blocks added this step (the whole table when `replaces`); None: none added."""
    replaces: bool
    """A new or resumed request: `new_blocks` is its whole block table."""
    tokens_with_kv: int
    """Its tokens whose KV exists once this step has run (computed before it plus scheduled in it)."""


@dataclass
class OffloadCounters:
    """What the connector did since they were last taken."""

    preemptions_stored: int = 0
    """Preemptions whose blocks (all or the start) were copied to host memory."""
    preemptions_not_stored: int = 0
    """Preemptions with no full block or no free slot: recomputed in full on resume."""
    resumed_from_host: int = 0
    blocks_stored: int = 0
    blocks_loaded: int = 0
    tokens_loaded: int = 0
    """Prompt and output tokens a resumed request did not recompute."""
    tokens_preempted: int = 0
    """Prompt and output tokens the preempted requests had at their preemption."""
    tokens_recomputed: int = 0
    """Tokens of resumed requests computed again: neither in vLLM's own prefix cache nor loaded from host memory."""

    def is_empty(self) -> bool:
        return not any(vars(self).values())


@dataclass
class _Running:
    blocks: list[int]
    tokens_with_kv: int


@dataclass
class _Stored:
    slots: list[int]
    tokens: int
    """Tokens covered: len(slots) full blocks."""


@dataclass
class PreemptedKVPlanner:
    """Host slot allocation and per-step copy plans for one engine."""

    num_slots: int
    block_size: int
    _free: list[int] = field(init=False)
    _running: dict[str, _Running] = field(default_factory=dict, init=False)
    _stored: dict[str, _Stored] = field(default_factory=dict, init=False)
    _stores: list[BlockCopy] = field(default_factory=list, init=False)
    _loads: list[BlockCopy] = field(default_factory=list, init=False)
    _loaded_this_step: list[int] = field(default_factory=list, init=False)
    _release_next_step: list[int] = field(default_factory=list, init=False)
    _preempted: dict[str, int] = field(default_factory=dict, init=False)
    """Requests preempted and not yet resumed, with their prefix-cache hit at the last resume attempt."""
    counters: OffloadCounters = field(default_factory=OffloadCounters, init=False)

    def __post_init__(self) -> None:
        self._free = list(range(self.num_slots - 1, -1, -1))

    @property
    def free_slots(self) -> int:
        return len(self._free)

    def stored_tokens(self, request_id: str, num_tokens: int, num_computed_tokens: int) -> int:
        """Tokens beyond `num_computed_tokens` (vLLM's own prefix-cache hit) this request can load from host memory."""
        if request_id in self._preempted:
            self._preempted[request_id] = num_computed_tokens
        stored = self._stored.get(request_id)
        return 0 if stored is None else max(self._usable(stored, num_tokens) - num_computed_tokens, 0)

    def loading(self, request_id: str, block_table: list[int], num_tokens: int, num_external_tokens: int) -> None:
        """vLLM allocated `block_table` for a resuming request of `num_tokens` tokens and takes `num_external_tokens`
        of them from us: the blocks that end the usable stored prefix (those before them were hits in vLLM's own
        prefix cache). With none taken, the slots are free at once."""
        if request_id in self._preempted:
            hit = self._preempted.pop(request_id)
            self.counters.tokens_recomputed += max(num_tokens - hit - num_external_tokens, 0)
        stored = self._stored.pop(request_id, None)
        if stored is None:
            return
        if num_external_tokens <= 0:
            self._release(stored.slots)
            return
        end = min(self._usable(stored, num_tokens) // self.block_size, len(block_table))
        start = end - num_external_tokens // self.block_size
        self._loads.append(BlockCopy(tuple(block_table[start:end]), tuple(stored.slots[start:end])))
        self._loaded_this_step += stored.slots
        self.counters.resumed_from_host += 1
        self.counters.blocks_loaded += end - start
        self.counters.tokens_loaded += num_external_tokens

    def _usable(self, stored: _Stored, num_tokens: int) -> int:
        """The stored tokens a request of `num_tokens` can load: whole blocks before its final token, which vLLM
        always computes."""
        return min(stored.tokens, (num_tokens - 1) // self.block_size * self.block_size)

    def step(self, preempted: Iterable[tuple[str, int]], scheduled: Iterable[Scheduled]) -> StepCopies:
        """The copies of one scheduler step. `preempted`: each request preempted in it with its token count then
        (prompt and output so far); `scheduled`: what the step scheduled."""
        self._release(self._release_next_step)  # read by the previous step's loads, which have run
        self._release_next_step, self._loaded_this_step = self._loaded_this_step, []
        for request_id, num_tokens in preempted:
            self._store(request_id, num_tokens)
        for item in scheduled:
            running = self._running.get(item.request_id)
            if item.replaces or running is None:
                self._running[item.request_id] = _Running(list(item.new_blocks or []), item.tokens_with_kv)
                continue
            running.blocks += item.new_blocks or []
            running.tokens_with_kv = item.tokens_with_kv
        copies = StepCopies(tuple(self._stores), tuple(self._loads))
        self._stores, self._loads = [], []
        return copies

    def finished(self, request_id: str) -> None:
        """The request finished or was aborted: its slots are free, nothing of it is kept."""
        self._running.pop(request_id, None)
        self._preempted.pop(request_id, None)
        stored = self._stored.pop(request_id, None)
        if stored is not None:
            self._release(stored.slots)

    def _release(self, slots: list[int]) -> None:
        """Back on the stack so that the next allocation pops them in the order they were allocated."""
        self._free += reversed(slots)

    def take_counters(self) -> OffloadCounters:
        counters, self.counters = self.counters, OffloadCounters()
        return counters

    def _store(self, request_id: str, num_tokens: int) -> None:
        running = self._running.pop(request_id, None)
        if running is None:
            return
        self.counters.tokens_preempted += num_tokens
        self._preempted[request_id] = 0
        # the last token's KV is never needed from us (vLLM recomputes it), and a token without KV has none to copy
        tokens = min(running.tokens_with_kv, num_tokens - 1)
        blocks = min(tokens // self.block_size, len(running.blocks), len(self._free))
        if blocks == 0:
            self.counters.preemptions_not_stored += 1
            return
        slots = [self._free.pop() for _ in range(blocks)]
        self._stored[request_id] = _Stored(slots, blocks * self.block_size)
        self._stores.append(BlockCopy(tuple(running.blocks[:blocks]), tuple(slots)))
        self.counters.preemptions_stored += 1
        self.counters.blocks_stored += blocks
