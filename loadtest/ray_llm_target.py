"""Ray Serve LLM's OpenAI app (`ray.serve.llm.build_openai_app`) on the same model and vLLM engine settings
as a thinktier tier: the peer that `thinktier loadtest compare` measures against.

It gets the tier's engine arguments (dtype, lengths, batch size, KV cache size, prefix caching, eager mode,
thread binding on CPU) and a reasoning parser when the tier thinks, and nothing that is thinktier's own:
no difficulty routing, no thinking budgets, no priority scheduling, no shedding.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx

from cluster.models import resolve_model
from policies.schema import Tier

REASONING_PARSER = "deepseek_r1"
"""Splits `<think>...</think>` into the `reasoning` field, as the tier's own parser does."""


@dataclass(frozen=True)
class RayLLMSettings:
    model_path: str
    model_id: str
    engine_kwargs: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    accelerator: str = "cpu"
    accelerator_type: str | None = None
    num_cpus: float = 1.0


def settings_from_tier(tier: Tier, model_id: str = "ray-llm", cpu_threads: str | None = None) -> RayLLMSettings:
    """Ray Serve LLM settings equivalent to one replica of `tier`; `cpu_threads` overrides the tier's binding
    on CPU (give the peer as many cores as the whole thinktier deployment uses)."""
    engine = tier.engine
    kwargs: dict[str, Any] = {
        "dtype": engine.dtype,
        "max_model_len": engine.max_model_len,
        "max_num_seqs": engine.max_num_seqs,
        "enable_prefix_caching": engine.enable_prefix_caching,
        "enforce_eager": engine.enforce_eager,
        "kv_cache_dtype": engine.kv_cache_dtype,
    }
    optional = {
        "max_num_batched_tokens": engine.max_num_batched_tokens,
        "block_size": engine.block_size,
        "kv_cache_memory_bytes": int(engine.kv_cache_memory_gib * 2**30) if engine.kv_cache_memory_gib else None,
        "reasoning_parser": REASONING_PARSER if tier.thinking else None,
    }
    kwargs.update({k: v for k, v in optional.items() if v is not None})
    if tier.pool.accelerator == "gpu":
        kwargs["tensor_parallel_size"] = engine.tensor_parallel_size
        if engine.kv_cache_memory_gib is None:
            kwargs["gpu_memory_utilization"] = engine.gpu_memory_utilization
        return RayLLMSettings(
            resolve_model(tier.model), model_id, kwargs, accelerator="gpu", accelerator_type=tier.pool.accelerator_type
        )
    threads = cpu_threads or engine.cpu_threads
    env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    if threads:
        env["VLLM_CPU_OMP_THREADS_BIND"] = threads
    return RayLLMSettings(resolve_model(tier.model), model_id, kwargs, env=env, num_cpus=tier.pool.num_cpus)


def llm_config(settings: RayLLMSettings) -> dict[str, Any]:
    """The `LLMConfig` fields (as a dict `build_openai_app` validates) for `settings`."""
    config: dict[str, Any] = {
        "model_loading_config": {"model_id": settings.model_id, "model_source": settings.model_path},
        "engine_kwargs": settings.engine_kwargs,
        "deployment_config": {"num_replicas": 1},
        "runtime_env": {"env_vars": settings.env},
    }
    if settings.accelerator == "cpu":
        config["accelerator_config"] = {"kind": "cpu"}
        config["placement_group_config"] = {"bundles": [{"CPU": settings.num_cpus}]}
    elif settings.accelerator_type:
        config["accelerator_type"] = settings.accelerator_type
    return config


class RayLLMApp:
    """Starts Ray, Ray Serve and the Ray Serve LLM OpenAI app on `port`; waits until the model answers
    `/v1/models`; shuts everything down on exit. vLLM's engine metrics come out of Ray's metrics agent on
    `metrics_port` (names prefixed `ray_vllm_`)."""

    APP_NAME = "ray-serve-llm"

    def __init__(self, settings: RayLLMSettings, port: int, metrics_port: int, ready_timeout_s: float = 900.0) -> None:
        self.settings = settings
        self.port = port
        self.metrics_port = metrics_port
        self.ready_timeout_s = ready_timeout_s

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def __enter__(self) -> RayLLMApp:
        import ray
        from ray import serve
        from ray.serve.llm import build_openai_app

        os.environ.update(self.settings.env)  # the driver validates engine args with the same vLLM platform
        ray.init(
            num_cpus=os.cpu_count(),
            include_dashboard=False,
            _metrics_export_port=self.metrics_port,
            runtime_env={"env_vars": self.settings.env},
        )
        try:
            serve.start(http_options={"host": "127.0.0.1", "port": self.port})
            app = build_openai_app({"llm_configs": [llm_config(self.settings)]})
            serve.run(app, name=self.APP_NAME, route_prefix="/", blocking=False)
            self._wait_ready()
        except BaseException:
            self._shutdown()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.ready_timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            try:
                response = httpx.get(f"{self.url}/v1/models", timeout=5)
                if response.status_code == 200 and self.settings.model_id in response.text:
                    return
                last = f"HTTP {response.status_code}: {response.text[:200]}"
            except httpx.HTTPError as exc:
                last = f"{type(exc).__name__}: {exc}"
            time.sleep(2)
        raise TimeoutError(
            f"Ray Serve LLM did not list model {self.settings.model_id!r} at {self.url}/v1/models within "
            f"{self.ready_timeout_s:g} s (last: {last}); see the Ray logs under /tmp/ray/session_latest/logs"
        )

    def _shutdown(self) -> None:
        import ray
        from ray import serve

        if ray.is_initialized():
            serve.shutdown()
            ray.shutdown()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._shutdown()
