"""The vLLM engine of a tier's replicas: its arguments, KV offloading and what enforces thinking budgets."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from thinktier.policies.schema.base import StrictModel

KVCacheDType = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"]


KVOffloadingMode = Literal["off", "native", "preempted"]


class KVOffloading(StrictModel):
    """KV blocks kept in the replica's host memory.

    'native': vLLM's OffloadingConnector (GPU only), which stores prompt blocks as they fill and serves later prefix
    hits from them. 'preempted': the project's preempt-offload connector (deployments/tier/kv_offload), which copies a
    request's blocks out only when the engine preempts it and loads them back when it resumes, instead of vLLM's
    recompute of its prompt and thinking so far; blocks of finished requests are never kept (the next turn does not
    send a thinking section back). It runs on GPU and CPU tiers alike (on a CPU tier the copy stays in RAM, outside
    the KV cache the scheduler reuses)."""

    mode: KVOffloadingMode = Field(
        "off",
        description="'off', 'native' (vLLM's connector: prompt blocks as they fill) or 'preempted' (a preempted "
        "request's blocks, loaded back on resume).",
    )
    size_gib: float = Field(0.0, ge=0, description="Host memory per replica for offloaded KV, GiB; within pool.memory_gib.")
    backend: Literal["native", "lmcache"] = Field("native", description="vLLM KV offloading backend (mode 'native' only).")

    @property
    def enabled(self) -> bool:
        return self.mode != "off"

    def problems(self) -> list[str]:
        """Settings that contradict each other, each with its fix."""
        if self.mode == "off" and self.size_gib > 0:
            return [f"kv_offloading.size_gib: {self.size_gib:g} GiB with mode 'off' would do nothing; "
                    "set mode: preempted (or native), or size_gib: 0"]
        if self.mode != "off" and self.size_gib == 0:
            return [f"kv_offloading.mode: {self.mode!r} needs host memory; set size_gib (e.g. 16) or mode: off"]
        if self.mode != "native" and self.backend != "native":
            return [f"kv_offloading.backend: {self.backend!r} applies to mode 'native' only; remove it"]
        return []


BudgetProcessor = Literal["thinktier", "vllm"]


class EngineArgs(StrictModel):
    """vLLM engine arguments for every replica of a tier."""

    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Weight and activation dtype.")
    max_model_len: int = Field(8192, ge=64, description="Longest prompt + output a request may have, tokens.")
    max_num_seqs: int = Field(64, ge=1, description="Most requests decoded together in one step.")
    max_num_batched_tokens: int | None = Field(None, ge=64, description="Token budget of one scheduler step.")
    kv_cache_dtype: KVCacheDType = Field("auto", description="KV cache dtype; fp8 doubles KV capacity on GPUs.")
    kv_cache_memory_gib: float | None = Field(
        None, gt=0, description="KV cache size per replica, GiB. Required on CPU; on GPU it overrides gpu_memory_utilization."
    )
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1, description="Share of GPU memory vLLM may use (GPU only).")
    block_size: int | None = Field(None, ge=1, description="KV block size in tokens; vLLM's default when unset.")
    enable_prefix_caching: bool = Field(True, description="Reuse KV of shared prompt prefixes.")
    scheduling_policy: Literal["fcfs", "priority"] = Field(
        "priority", description="'priority' lets the router's difficulty reach vLLM's scheduler (hard requests preempted first)."
    )
    thinking_budget_processor: BudgetProcessor = Field(
        "thinktier",
        description="What ends a thinking section at its budget. 'thinktier': the project's vLLM logits processor, "
        "which looks at each new token once and writes the whole close, the end token and the blank line after it, as "
        "the model does after a section it ends itself. 'vllm': vLLM's own thinking_token_budget, which in vLLM 0.24 rescans "
        "every sequence's whole output on every step (Python, O(output) per sequence and step: milliseconds a step "
        "at GPU batch sizes); kept for comparison.",
    )
    kv_offloading: KVOffloading = Field(default_factory=KVOffloading)
    load_format: Literal["auto", "dummy"] = Field(
        "auto",
        description="'dummy' gives random weights of the model's geometry: real speed and memory figures for benchmarks "
        "without weight files (the model folder needs only its config and tokenizer).",
    )
    enforce_eager: bool = Field(False, description="Skip torch.compile and CUDA graphs: faster start, slower decode.")
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs per replica.")
    cpu_threads: str | None = Field(
        None, description="CPU only: cores the engine's threads are bound to, e.g. '0' or '0-1' (VLLM_CPU_OMP_THREADS_BIND)."
    )
