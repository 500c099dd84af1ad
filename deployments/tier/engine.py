"""A tier's vLLM engine with thinking budgets, the reasoning/answer split and straggler tracking.

No Ray here: the Serve deployment in deployments/tier/tier.py wraps this class, and the GPU
benchmark drives it directly. Everything it does is set by the tier's policy section.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from thinktier.deployments.tier.certainty import CertaintyTracker, probe_answer, probe_prompt
from thinktier.deployments.tier.kv_offload import CONNECTOR, CONNECTOR_MODULE, HOST_BYTES, KV_ROLE
from thinktier.deployments.tier.kv_offload.planner import COUNTER_PREFIX, LOAD_BYTES, STORE_BYTES
from thinktier.deployments.tier.models import resolve_model
from thinktier.deployments.tier.preemption_count import SCHEDULER, preemptions_of
from thinktier.deployments.tier.prompts import normalize_messages
from thinktier.deployments.tier.protocol import Economy, PromptTooLong, TierChunk, TierRequest
from thinktier.deployments.tier.replica_stats import ReplicaStats
from thinktier.deployments.tier.self_consistency import Embed, Vote
from thinktier.deployments.tier.thinking import (
    NO_THINKING,
    DecodeLimits,
    ReasoningSplitter,
    ThinkingDelimiters,
    ThinkingTokens,
    decode_limits,
    open_section,
)
from thinktier.policies.schema import DifficultyClass, Tier

if TYPE_CHECKING:
    from vllm.inputs import TokensPrompt
    from vllm.renderers.chat_utils import ChatCompletionMessageParam

GIB = 1 << 30


@dataclass
class _Running:
    started: float
    difficulty: DifficultyClass
    borrowed: bool = False
    thinking_tokens: int = 0
    preemptions: int = 0
    """Times the engine preempted this request's decodes so far (the thinking and the answer decode)."""


FP8_KV_DTYPES = ("fp8", "fp8_e4m3", "fp8_e5m2")


def cpu_supports_fp8_kv() -> bool:
    """vLLM's CPU backend stores FP8 KV only with AVX-512 or AMX."""
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            flags = cpuinfo.read()
    except OSError:
        return False
    return "avx512f" in flags or "amx_tile" in flags


def engine_env(tier: Tier) -> dict[str, str]:
    """Environment for a tier replica's vLLM engine (set before vLLM is imported)."""
    env = {"VLLM_NO_USAGE_STATS": "1", "VLLM_DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}
    if tier.pool.accelerator == "cpu":
        env |= {
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_CPU_NUM_OF_RESERVED_CPU": "0",
            "VLLM_CPU_OMP_THREADS_BIND": tier.engine.cpu_threads or "auto",
        }
    return env


class HostCannotServe(RuntimeError):
    """The tier asks for something this machine cannot do; the message says what to change."""


def check_host(tier: Tier) -> None:
    """Capabilities of the serving machine, checked where the engine starts (the policy may be validated elsewhere)."""
    if tier.pool.accelerator == "cpu" and tier.engine.kv_cache_dtype in FP8_KV_DTYPES and not cpu_supports_fp8_kv():
        raise HostCannotServe(
            f"engine.kv_cache_dtype: {tier.engine.kv_cache_dtype!r} needs a GPU or an x86 CPU with AVX-512 or AMX, "
            "which this machine lacks; use kv_cache_dtype: auto or pool.accelerator: gpu"
        )


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
        "load_format": engine.load_format,
        "disable_log_stats": False,
        "scheduler_cls": SCHEDULER,  # vLLM's own scheduler, reporting each request's preemptions
    }
    if engine.kv_cache_memory_gib is not None:
        kwargs["kv_cache_memory_bytes"] = int(engine.kv_cache_memory_gib * GIB)
    if engine.max_num_batched_tokens is not None:
        kwargs["max_num_batched_tokens"] = engine.max_num_batched_tokens
    if engine.block_size is not None:
        kwargs["block_size"] = engine.block_size
    if engine.kv_offloading.mode == "native":
        kwargs["kv_offloading_size"] = engine.kv_offloading.size_gib
        kwargs["kv_offloading_backend"] = engine.kv_offloading.backend
    elif engine.kv_offloading.mode == "preempted":
        kwargs["kv_transfer_config"] = {
            "kv_connector": CONNECTOR,
            "kv_connector_module_path": CONNECTOR_MODULE,
            "kv_role": KV_ROLE,  # see KV_ROLE: a consumer role sets off a preemption storm in vLLM 0.24
            "kv_connector_extra_config": {HOST_BYTES: int(engine.kv_offloading.size_gib * GIB)},
        }
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
        self.preemptions_resumed_from_host_total = 0
        self.preempted_tokens_total = 0
        self.kv_offload_loaded_tokens_total = 0
        self.preempted_tokens_recomputed_total = 0
        # vLLM's prefix-cache lookups of requests that were preempted before: what a resume finds on the GPU, with or
        # without a connector (a request that cannot be admitted is looked up again at the next step).
        self.resume_lookups_total = 0
        self.resume_lookup_tokens_total = 0
        self.resume_prefix_hits_total = 0

    def record_offload(self, connector_stats: dict[str, Any] | None, connector_prefix_stats: Any) -> None:
        """Add one interval of KV offload traffic (bytes each way), CPU-cache lookups (tokens), and preempt-offload's
        own counters (resumed preemptions, tokens preempted and loaded back)."""
        if connector_prefix_stats is not None:
            self.offload_cache_queries_total += connector_prefix_stats.queries
            self.offload_cache_hits_total += connector_prefix_stats.hits
        counters = (connector_stats or {}).get("data", {})

        def total(name: str) -> Any:
            return sum(counters.get(name, {}).values())

        self.offload_store_bytes_total += total(STORE_BYTES)
        self.offload_load_bytes_total += total(LOAD_BYTES)
        self.preemptions_resumed_from_host_total += total(COUNTER_PREFIX + "resumed_from_host")
        self.preempted_tokens_total += total(COUNTER_PREFIX + "tokens_preempted")
        self.kv_offload_loaded_tokens_total += total(COUNTER_PREFIX + "tokens_loaded")
        self.preempted_tokens_recomputed_total += total(COUNTER_PREFIX + "tokens_recomputed")

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
                    stats.resume_lookups_total += scheduler_stats.prefix_cache_stats.preempted_requests
                    stats.resume_lookup_tokens_total += scheduler_stats.prefix_cache_stats.preempted_queries
                    stats.resume_prefix_hits_total += scheduler_stats.prefix_cache_stats.preempted_hits
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
    load_format="dummy", or a kv_transfer_config for the offloading connector). `embed` gives free-text answers of
    self-consistency samples their embeddings (the difficulty classifier's); without it they compare as text."""

    def __init__(
        self, name: str, tier: Tier, engine_overrides: Mapping[str, Any] | None = None, embed: Embed | None = None
    ) -> None:
        check_host(tier)  # before vLLM loads: a clear message instead of its own failure
        from vllm.config.reasoning import ReasoningConfig
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        from thinktier.deployments.tier.reasoning_delimiters import engine_tokenizer, thinking_delimiters
        from thinktier.deployments.tier.thinking_budget import ThinkingBudgetProcessor

        self.name = name
        self.tier = tier
        model_path = resolve_model(tier.model)
        kwargs = engine_kwargs(tier, model_path) | dict(engine_overrides or {})
        self.delimiters: ThinkingDelimiters | None = None
        if tier.thinking or tier.empty_thinking:  # checked before the engine loads: a tokenizer that cannot delimit it is refused
            setting = f"tiers.{name}.reasoning_parser"
            self.delimiters = thinking_delimiters(tier.reasoning_parser, engine_tokenizer(kwargs), tier.model, setting)
        if self.delimiters is not None and tier.engine.thinking_budget_processor == "vllm":
            kwargs["reasoning_config"] = ReasoningConfig(
                reasoning_start_str=self.delimiters.start, reasoning_end_str=self.delimiters.end
            )
        elif self.delimiters is not None:
            kwargs["logits_processors"] = [ThinkingBudgetProcessor]
        self._stats = _EngineStats()
        if isinstance(kwargs.get("kv_transfer_config"), dict):  # engine_kwargs stays free of vLLM types
            from vllm.config import KVTransferConfig

            kwargs["kv_transfer_config"] = KVTransferConfig(**kwargs["kv_transfer_config"])
        self.engine = AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs), stat_loggers=[self._stats.logger_factory()])
        self.tokenizer = self.engine.get_tokenizer()
        self.thinking_tokens = NO_THINKING if self.delimiters is None else ThinkingTokens.of(self.tokenizer, self.delimiters)
        self._running: dict[str, _Running] = {}
        self._embed = embed
        self._last_output_at = float("-inf")

    def render_prompt(self, request: TierRequest) -> list[int]:
        """Prompt token ids: the chat template (or raw prompt), then the opened thinking section on thinking tiers (an
        empty one, opened and closed, on tiers with empty_thinking).

        Chat templates of R1-style models open the section themselves (the generation prompt ends with
        "<think>\n"); it is then not opened twice."""
        if request.messages is not None:
            messages = normalize_messages(request.messages) if self.tier.normalize_prompts else list(request.messages)
            # Plain role/content dicts, as vLLM's message types describe; with tokenize=False the result is the text.
            chat = cast("list[ChatCompletionMessageParam]", messages)
            text = cast(str, self.tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True))
        else:
            text = request.prompt or ""
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        limit = request.max_prompt_tokens or self.tier.max_prompt_tokens
        if len(ids) > limit:
            raise PromptTooLong(
                f"prompt is {len(ids)} tokens; tier {self.name!r} accepts at most {limit}: "
                "shorten the prompt"
            )
        if self.delimiters is None:
            return ids
        opened = text.endswith(self.delimiters.start + "\n")
        budget = request.thinking_tokens if self.thinks(request) else 0  # empty_thinking: the section closed at once
        return open_section(ids, self.thinking_tokens, opened, budget)

    def thinks(self, request: TierRequest) -> bool:
        """Whether `request` writes a thinking section here: on a thinking tier, or borrowed onto a tier that serves a
        reasoning model with its thinking off (empty_thinking), when its budget allows thinking."""
        can = self.tier.thinking or (request.borrowed and self.delimiters is not None)
        return can and request.thinking_tokens > 0

    def _sampling_params(self, request: TierRequest, limits: DecodeLimits) -> Any:
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        extra = limits.sampler_args(self.tier.engine.thinking_budget_processor, self.thinking_tokens)
        return SamplingParams(
            max_tokens=limits.max_tokens,
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
        """Stream thinking then answer; the last chunk carries the totals. A request with several samples decodes
        them together and streams the voted answer (deployments/tier/self_consistency.py)."""
        if request.samples > 1:
            async for chunk in Vote(request, self._generate_one, self._embed).stream():
                yield chunk
            return
        async for chunk in self._generate_one(request):
            yield chunk

    async def _generate_one(self, request: TierRequest) -> AsyncIterator[TierChunk]:
        """One decode. The answer is cut at its budget. A model that ends its turn inside the thinking section, or
        whose probes became certain of the answer (certainty exit), gets the section closed for it and is asked for
        the answer in a second decode over the same prefix, so no request ends without an answer."""
        prompt_ids = self.render_prompt(request)
        thinking = self.thinks(request)
        running = _Running(started=time.monotonic(), difficulty=request.difficulty, borrowed=request.borrowed)
        self._running[request.request_id] = running
        split = ReasoningSplitter(thinking, self.thinking_tokens.end_id, request.thinking_tokens, request.answer_tokens)
        certainty = CertaintyTracker(request.certainty_exit) if thinking and request.certainty_exit else None
        open_len = len(self.thinking_tokens.open_ids)
        try:
            limits = decode_limits(request.thinking_tokens, request.answer_tokens, thinking, open_len)
            decode = self._decode(request, prompt_ids, limits, request.request_id, split, running, certainty)
            async for chunk in decode:
                yield chunk
            certain = split.in_thinking and split.finish is None  # the probes ended the thinking
            if split.ended_in_thinking or certain:
                continuation = split.answer_after_thinking(prompt_ids, self.thinking_tokens)
                room = self.tier.engine.max_model_len - len(continuation)
                limits = decode_limits(0, request.answer_tokens, False, open_len, room)
                async for chunk in self._decode(request, continuation, limits, f"{request.request_id}-answer", split, running):
                    yield chunk
            totals = split.totals(len(prompt_ids))
            totals.preemptions = running.preemptions
            if certainty is not None:
                totals.economy = Economy(
                    early_stop="certainty" if certain else None, probes=certainty.probes,
                    tokens_saved=max(0, request.thinking_tokens - split.reasoning_tokens) if certain else 0,
                )
            yield totals
        finally:
            self._running.pop(request.request_id, None)

    async def _decode(
        self, request: TierRequest, prompt_ids: list[int], limits: DecodeLimits, request_id: str,
        split: ReasoningSplitter, running: _Running, certainty: CertaintyTracker | None = None,
    ) -> AsyncIterator[TierChunk]:
        """One engine request, until it ends, the answer budget is spent or (with `certainty`) the probes agree."""
        params = self._sampling_params(request, limits)
        stream = self.engine.generate(self._prompt(prompt_ids, request), params, request_id, priority=request.priority)
        ended = False
        try:
            async for output in stream:
                self._last_output_at = time.monotonic()
                ended = output.finished
                if ended:
                    running.preemptions += preemptions_of(output)
                completion = output.outputs[0]
                chunk = split.feed(
                    list(completion.token_ids), completion.text, self._decode_text, time.monotonic() - running.started,
                    output.finished, completion.finish_reason,
                )
                running.thinking_tokens = split.reasoning_tokens
                if chunk.reasoning or chunk.content:
                    yield chunk
                if split.finish is not None:
                    return
                if certainty is not None and split.in_thinking and certainty.due(split.reasoning_tokens):
                    answer = await self._probe(request, prompt_ids, split.thinking_ids, certainty.probes)
                    if certainty.record(answer, split.reasoning_tokens):
                        return
        finally:
            if not ended:  # cut at the answer budget, certain of the answer, or the client went away
                await self.engine.abort(request_id)

    def _prompt(self, prompt_ids: list[int], request: TierRequest) -> TokensPrompt:
        prompt: TokensPrompt = {"prompt_token_ids": prompt_ids}
        if request.cache_salt is not None:
            prompt["cache_salt"] = request.cache_salt
        return prompt

    async def _probe(self, request: TierRequest, prompt_ids: list[int], thinking_ids: list[int], number: int) -> str | None:
        """The model's answer now: a short greedy side request over the decode's prefix (a prefix-cache hit) and the
        probe text."""
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        settings = request.certainty_exit
        assert settings is not None
        probe_ids = self.tokenizer.encode(settings.probe, add_special_tokens=False)
        ids = probe_prompt(prompt_ids, thinking_ids, probe_ids)
        if len(ids) + settings.probe_tokens > self.tier.engine.max_model_len:
            return None  # no room left for a probe: the decode goes on to its budget
        params = SamplingParams(max_tokens=settings.probe_tokens, temperature=0.0, output_kind=RequestOutputKind.FINAL_ONLY,
                                skip_special_tokens=True)
        text = ""
        async for output in self.engine.generate(self._prompt(ids, request), params, f"{request.request_id}-probe{number}",
                                                 priority=request.priority):
            text = output.outputs[0].text
        return probe_answer(settings.probe, text)

    def _decode_text(self, ids: Any) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    @property
    def kv_capacity_tokens(self) -> int:
        """Tokens the GPU (or CPU) KV cache holds, as sized by vLLM at start."""
        cache = self.engine.vllm_config.cache_config
        return (cache.num_gpu_blocks or 0) * cache.block_size

    def producing(self, within_s: float) -> bool:
        """Whether the engine is alive and gave some request output within the last `within_s`."""
        return not self.engine.errored and time.monotonic() - self._last_output_at < within_s

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
            num_borrowed=sum(1 for r in self._running.values() if r.borrowed),
            num_preemptions_total=self._stats.num_preemptions_total,
            prefix_cache_queries_total=self._stats.prefix_cache_queries_total,
            prefix_cache_hits_total=self._stats.prefix_cache_hits_total,
            kv_offload_stored_bytes_total=int(self._stats.offload_store_bytes_total),
            kv_offload_loaded_bytes_total=int(self._stats.offload_load_bytes_total),
            preemptions_resumed_from_host_total=self._stats.preemptions_resumed_from_host_total,
            preempted_tokens_total=self._stats.preempted_tokens_total,
            kv_offload_loaded_tokens_total=self._stats.kv_offload_loaded_tokens_total,
            preempted_tokens_recomputed_total=self._stats.preempted_tokens_recomputed_total,
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
