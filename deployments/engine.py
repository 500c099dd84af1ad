"""A tier's vLLM engine with thinking budgets, the reasoning/answer split and straggler tracking.

No Ray here: the Serve deployment in deployments/tier.py wraps this class, and the GPU
benchmark drives it directly. Everything it does is set by the tier's policy section.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from deployments.models import resolve_model
from deployments.replica_stats import ReplicaStats
from policies.schema import DifficultyClass, Tier

GIB = 1 << 30
# Counters of vLLM's native OffloadingConnector (GPU <-> CPU KV transfers), in its stats payload.
OFFLOAD_STORE_BYTES = "vllm:kv_offload_store_bytes"
OFFLOAD_LOAD_BYTES = "vllm:kv_offload_load_bytes"


class PromptTooLong(ValueError):
    """The rendered prompt is longer than the tier accepts (a client error)."""


@dataclass(frozen=True)
class TierRequest:
    """One decode job for a tier, with the budgets the router decided."""

    request_id: str
    thinking_tokens: int
    answer_tokens: int
    max_prompt_tokens: int | None = None
    """Longest prompt accepted; the tier's policy limit when None (the ingress passes the live policy's)."""
    priority: int = 0
    difficulty: DifficultyClass = "medium"
    messages: tuple[dict[str, str], ...] | None = None
    prompt: str | None = None
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()


@dataclass
class TierChunk:
    """A piece of the stream: new thinking and answer text; the last chunk carries the totals."""

    reasoning: str = ""
    content: str = ""
    finish_reason: Literal["stop", "length"] | None = None
    prompt_tokens: int = 0
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    budget_forced: bool = False
    replica: str | None = None
    """The serving replica's id, on the first chunk (set by the Serve deployment)."""
    first_token_s: float | None = None
    """On the last chunk: seconds from the engine taking the request to its first token (thinking or answer)."""
    first_visible_s: float | None = None
    """On the last chunk: seconds from the engine taking the request to its first answer token."""


@dataclass
class _Decoding:
    """Where one request's decoding stands, across its engine requests."""

    in_thinking: bool
    thinking_ids: list[int] = field(default_factory=list)
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    budget_forced: bool = False
    finish: Literal["stop", "length"] | None = None
    first_token_s: float | None = None
    first_visible_s: float | None = None

    def saw(self, chunk: TierChunk, elapsed_s: float) -> None:
        if self.first_token_s is None and (chunk.reasoning or chunk.content):
            self.first_token_s = elapsed_s
        if self.first_visible_s is None and chunk.content:
            self.first_visible_s = elapsed_s


@dataclass
class _Running:
    started: float
    difficulty: DifficultyClass
    thinking_tokens: int = 0


def engine_kwargs(tier: Tier, model_path: str) -> dict[str, Any]:
    """vLLM AsyncEngineArgs keyword arguments for a tier (pure: tested without vLLM)."""
    engine = tier.engine
    kwargs: dict[str, Any] = {
        "model": model_path,
        "dtype": engine.dtype,
        "max_model_len": engine.max_model_len,
        "max_num_seqs": engine.max_num_seqs,
        "kv_cache_dtype": engine.kv_cache_dtype,
        "enable_prefix_caching": engine.enable_prefix_caching,
        "scheduling_policy": engine.scheduling_policy,
        "enforce_eager": engine.enforce_eager,
        "tensor_parallel_size": engine.tensor_parallel_size,
        "gpu_memory_utilization": engine.gpu_memory_utilization,
        "disable_log_stats": False,
    }
    if engine.kv_cache_memory_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(engine.kv_cache_memory_gib * GIB)
    if engine.max_num_batched_tokens is not None:
        kwargs["max_num_batched_tokens"] = engine.max_num_batched_tokens
    if engine.block_size is not None:
        kwargs["block_size"] = engine.block_size
    if engine.kv_offloading.enabled:
        kwargs["kv_offloading_size"] = engine.kv_offloading.size_gib
        kwargs["kv_offloading_backend"] = engine.kv_offloading.backend
    return kwargs


class _EngineStats:
    """vLLM stat logger that keeps the latest scheduler figures for the replica to report."""

    def __init__(self) -> None:
        self.kv_occupancy = 0.0
        self.num_running = 0
        self.num_waiting = 0
        self.num_preemptions_total = 0
        self.generation_tokens_total = 0
        self.prefix_cache_queries_total = 0
        self.prefix_cache_hits_total = 0
        self.offload_store_bytes_total = 0.0
        self.offload_load_bytes_total = 0.0
        self.offload_cache_queries_total = 0
        self.offload_cache_hits_total = 0

    def record_offload(self, connector_stats: dict[str, Any] | None, connector_prefix_stats: Any) -> None:
        """Add one interval of KV offload traffic (bytes each way) and CPU-cache lookups (tokens)."""
        if connector_prefix_stats is not None:
            self.offload_cache_queries_total += connector_prefix_stats.queries
            self.offload_cache_hits_total += connector_prefix_stats.hits
        counters = (connector_stats or {}).get("data", {})
        self.offload_store_bytes_total += sum(counters.get(OFFLOAD_STORE_BYTES, {}).values())
        self.offload_load_bytes_total += sum(counters.get(OFFLOAD_LOAD_BYTES, {}).values())

    def logger_factory(self) -> Any:
        from vllm.v1.metrics.loggers import StatLoggerBase

        stats = self

        class _Logger(StatLoggerBase):
            def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
                pass

            def record(self, scheduler_stats: Any, iteration_stats: Any, mm_cache_stats: Any = None, engine_idx: int = 0) -> None:
                if scheduler_stats is not None:
                    stats.kv_occupancy = scheduler_stats.kv_cache_usage
                    stats.num_running = scheduler_stats.num_running_reqs
                    stats.num_waiting = scheduler_stats.num_waiting_reqs
                    stats.prefix_cache_queries_total += scheduler_stats.prefix_cache_stats.queries
                    stats.prefix_cache_hits_total += scheduler_stats.prefix_cache_stats.hits
                    stats.record_offload(scheduler_stats.kv_connector_stats, scheduler_stats.connector_prefix_cache_stats)
                if iteration_stats is not None:
                    stats.num_preemptions_total += iteration_stats.num_preempted_reqs
                    stats.generation_tokens_total += iteration_stats.num_generation_tokens

            def log_engine_initialized(self) -> None:
                pass

        return _Logger


class TierEngine:
    """vLLM AsyncLLM for one tier replica.

    `engine_overrides` are extra AsyncEngineArgs that no policy sets, for benchmarks (e.g.
    load_format="dummy", or a kv_transfer_config for the offloading connector)."""

    def __init__(self, name: str, tier: Tier, engine_overrides: Mapping[str, Any] | None = None) -> None:
        from vllm.config.reasoning import ReasoningConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        self.name = name
        self.tier = tier
        model_path = resolve_model(tier.model)
        kwargs = engine_kwargs(tier, model_path) | dict(engine_overrides or {})
        if tier.thinking:
            kwargs["reasoning_config"] = ReasoningConfig(reasoning_start_str=tier.think_start, reasoning_end_str=tier.think_end)
        self._stats = _EngineStats()
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=[self._stats.logger_factory()])
        self.tokenizer = self.engine.get_tokenizer()
        self._think_open = tier.think_start + "\n"
        self._think_start_ids = self.tokenizer.encode(self._think_open, add_special_tokens=False)
        self._think_end_id = self.tokenizer.convert_tokens_to_ids(tier.think_end) if tier.thinking else None
        self._close_ids = self.tokenizer.encode(tier.think_end + "\n\n", add_special_tokens=False)
        self._running: dict[str, _Running] = {}

    def render_prompt(self, request: TierRequest) -> list[int]:
        """Prompt token ids: the chat template (or raw prompt), then the opened thinking section on thinking tiers.

        Chat templates of R1-style models open the section themselves (the generation prompt ends with
        "<think>\n"); it is then not opened twice.
        With a zero thinking budget on a thinking tier the section is opened and closed at once, so the
        model answers directly (the "thinking off" mode of R1-style models)."""
        if request.messages is not None:
            text = self.tokenizer.apply_chat_template(list(request.messages), tokenize=False, add_generation_prompt=True)
        else:
            text = request.prompt or ""
        opened = self.tier.thinking and text.endswith(self._think_open)
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        limit = request.max_prompt_tokens or self.tier.max_prompt_tokens
        if len(ids) > limit:
            raise PromptTooLong(
                f"prompt is {len(ids)} tokens; tier {self.name!r} accepts at most {limit}: "
                "shorten the prompt"
            )
        if self.tier.thinking:
            if not opened:
                ids = ids + self._think_start_ids
            if request.thinking_tokens == 0:
                ids = ids + self._close_ids
        return ids

    def _sampling_params(self, request: TierRequest, thinking: bool, room: int | None = None) -> Any:
        """`room`: most tokens that still fit the context (a continuation after an early end of thinking)."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        extra: dict[str, Any] = {}
        max_tokens = request.answer_tokens
        if thinking:
            # vLLM counts the prompt's tokens after <think> ("\n") towards the budget.
            extra["thinking_token_budget"] = request.thinking_tokens + len(self._think_start_ids) - 1
            max_tokens += request.thinking_tokens + 1
        return SamplingParams(
            max_tokens=max_tokens if room is None else min(max_tokens, room),
            min_tokens=1,  # never an empty turn: the first token of a decode is not end-of-sequence
            temperature=request.temperature,
            top_p=request.top_p,
            seed=request.seed,
            stop=list(request.stop) or None,
            output_kind=RequestOutputKind.DELTA,
            skip_special_tokens=True,
            **extra,
        )

    async def generate(self, request: TierRequest) -> AsyncIterator[TierChunk]:
        """Stream thinking then answer; the last chunk carries the totals.

        The answer is cut at its budget. A model that ends its turn inside the thinking section
        (before the budget; small or untuned models do) gets the section closed for it and is
        asked for the answer in a second decode over the same prefix, so no request ends
        without an answer."""
        prompt_ids = self.render_prompt(request)
        thinking = self.tier.thinking and request.thinking_tokens > 0
        running = _Running(started=time.monotonic(), difficulty=request.difficulty)
        self._running[request.request_id] = running
        state = _Decoding(in_thinking=thinking)
        try:
            params = self._sampling_params(request, thinking)
            async for chunk in self._decode(request, prompt_ids, params, request.request_id, state, running):
                yield chunk
            if state.in_thinking and state.finish == "stop":
                state.in_thinking, state.finish = False, None
                continuation = prompt_ids + state.thinking_ids + self._close_ids
                room = self.tier.engine.max_model_len - len(continuation)
                params = self._sampling_params(request, thinking=False, room=room)
                async for chunk in self._decode(request, continuation, params, f"{request.request_id}-answer", state, running):
                    yield chunk
            yield TierChunk(
                finish_reason=state.finish or "stop",
                prompt_tokens=len(prompt_ids),
                reasoning_tokens=state.reasoning_tokens,
                answer_tokens=state.answer_tokens,
                budget_forced=state.budget_forced,
                first_token_s=state.first_token_s,
                first_visible_s=state.first_visible_s,
            )
        finally:
            self._running.pop(request.request_id, None)

    async def _decode(
        self, request: TierRequest, prompt_ids: list[int], params: Any, request_id: str, state: _Decoding, running: _Running
    ) -> AsyncIterator[TierChunk]:
        """One engine request: split its tokens into thinking and answer, until it ends or the answer budget is spent."""
        stream = self.engine.generate({"prompt_token_ids": prompt_ids}, params, request_id, priority=request.priority)
        ended = False
        try:
            async for output in stream:
                ended = output.finished
                completion = output.outputs[0]
                chunk = self._split(list(completion.token_ids), completion.text, request, state)
                running.thinking_tokens = state.reasoning_tokens
                state.saw(chunk, time.monotonic() - running.started)
                if state.answer_tokens >= request.answer_tokens and not output.finished:
                    state.finish = "length"
                elif output.finished:
                    state.finish = "length" if completion.finish_reason == "length" else "stop"
                if chunk.reasoning or chunk.content:
                    yield chunk
                if state.finish is not None:
                    return
        finally:
            if not ended:  # cut at the answer budget, or the client went away
                await self.engine.abort(request_id)

    def _split(self, ids: list[int], text: str, request: TierRequest, state: _Decoding) -> TierChunk:
        """New tokens as thinking and/or answer text; the thinking section ends at the think-end token."""
        chunk = TierChunk()
        if state.in_thinking and self._think_end_id in ids:
            cut = ids.index(self._think_end_id)
            state.reasoning_tokens += cut
            state.thinking_ids += ids[:cut]
            state.budget_forced = state.reasoning_tokens >= request.thinking_tokens
            after = ids[cut + 1 :]
            chunk.reasoning = self.tokenizer.decode(ids[:cut], skip_special_tokens=True)
            chunk.content = self.tokenizer.decode(after, skip_special_tokens=True)
            state.answer_tokens += len(after)
            state.in_thinking = False
        elif state.in_thinking:
            state.reasoning_tokens += len(ids)
            state.thinking_ids += ids
            chunk.reasoning = text
        else:
            state.answer_tokens += len(ids)
            chunk.content = text
        return chunk

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the GPU (or CPU) KV cache holds, as sized by vLLM at start."""
        cache = self.engine.vllm_config.cache_config
        return (cache.num_gpu_blocks or 0) * cache.block_size

    def stats(self) -> ReplicaStats:
        now = time.monotonic()
        limits = self.tier.stragglers
        stragglers = sum(
            1
            for r in self._running.values()
            if r.thinking_tokens > limits.thinking_tokens or now - r.started > limits.elapsed_s
        )
        return ReplicaStats(
            kv_occupancy=self._stats.kv_occupancy,
            num_running=self._stats.num_running,
            num_waiting=self._stats.num_waiting,
            num_stragglers=stragglers,
            num_long_running=sum(1 for r in self._running.values() if r.difficulty == "hard"),
            num_preemptions_total=self._stats.num_preemptions_total,
            prefix_cache_queries_total=self._stats.prefix_cache_queries_total,
            prefix_cache_hits_total=self._stats.prefix_cache_hits_total,
        )

    async def warmup(self) -> None:
        """One short decode so the first client request does not pay for lazy initialisation."""
        request = TierRequest(
            request_id=f"warmup-{self.name}", thinking_tokens=1, answer_tokens=1, prompt="hello"
        )
        async for _ in self.generate(request):
            pass

    def shutdown(self) -> None:
        self.engine.shutdown()


async def collect(chunks: AsyncIterator[TierChunk]) -> TierChunk:
    """Join a stream into one chunk (non-streaming responses)."""
    whole = TierChunk()
    reasoning: list[str] = []
    content: list[str] = []
    async for chunk in chunks:
        reasoning.append(chunk.reasoning)
        content.append(chunk.content)
        if chunk.finish_reason is not None:
            whole = chunk
    whole.reasoning = "".join(reasoning)
    whole.content = "".join(content)
    return whole

