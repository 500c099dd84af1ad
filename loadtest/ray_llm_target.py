"""Ray Serve LLM's OpenAI app (`ray.serve.llm.build_openai_app`) on the same model and vLLM engine settings
as a thinktier tier: the peer that `thinktier loadtest compare` and `thinktier bench fullstack` measure against.

It gets the tier's vLLM engine arguments (the same function builds them as for thinktier's own engines), its
replica count, its thread binding on CPU, and on a thinking tier the same prompt (thinking opened after the chat
template) and a reasoning parser; Ray Serve LLM's prefix-cache-aware request router. Nothing that is thinktier's
own: no difficulty routing, no budget per difficulty, no request priorities, no shedding. `peer_options` gives its
requests one budget through vLLM's own request fields."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, cast

import httpx

from thinktier.deployments.serve_options import replica_count_options
from thinktier.deployments.tier.engine import engine_kwargs
from thinktier.deployments.tier.models import resolve_model
from thinktier.loadtest.client import RequestOptions
from thinktier.policies.schema import Policy, Tier

THINKTIER_ONLY_ENGINE_ARGS = ("model", "scheduling_policy", "scheduler_cls")
"""Not passed on: Ray Serve LLM names the model itself, sets no request priorities to schedule by, and runs vLLM's
scheduler as it ships (thinktier's only adds each request's preemption count to its output)."""
PEER_MODEL_ID = "ray-llm"
"""The name Ray Serve LLM serves the model under."""
PEER_READY_LINE = "Ray Serve LLM serves"
"""How `thinktier loadtest peer`'s line starts once every engine replica runs."""
PREFIX_AWARE_ROUTER = "ray.serve.llm.request_router.PrefixCacheAffinityRouter"
"""Ray Serve LLM's prefix-cache-aware request router: its best setting for replicas that cache prompt prefixes."""


@dataclass(frozen=True)
class RayLLMSettings:
    model_path: str
    model_id: str
    engine_kwargs: dict[str, Any]
    env: dict[str, str] = field(default_factory=dict)
    accelerator: str = "cpu"
    accelerator_type: str | None = None
    num_cpus: float = 1.0
    scaling: dict[str, Any] = field(default_factory=lambda: {"num_replicas": 1})
    """`num_replicas`, or Ray Serve's default `autoscaling_config` between the tier's min and max replicas."""


def thinking_chat_template(model_path: str, think_start: str) -> str | None:
    """The model's chat template with the thinking section opened after the generation prompt, as thinktier's
    reasoning tier renders prompts; None when the template already opens it (R1-style models)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    opened = think_start + "\n"
    # Typed as any of its results; with tokenize=False it is the rendered text.
    rendered = cast(
        str, tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True)
    )
    if rendered.endswith(opened):
        return None
    return tokenizer.chat_template + "{% if add_generation_prompt %}" + opened + "{% endif %}"


def thinking_start(tier: Tier, model_path: str) -> str:
    """What opens the tier's thinking section: the start string of its reasoning parser, checked as the tier's own engine
    checks it."""
    from vllm.tokenizers import get_tokenizer

    from thinktier.deployments.tier.reasoning_delimiters import thinking_delimiters

    return thinking_delimiters(tier.reasoning_parser, get_tokenizer(model_path), tier.model).start


def settings_from_tier(tier: Tier, model_id: str = PEER_MODEL_ID, cpu_threads: str | None = None) -> RayLLMSettings:
    """Ray Serve LLM settings equivalent to one replica of `tier`; `cpu_threads` overrides the tier's binding."""
    model_path = resolve_model(tier.model)
    kwargs = {k: v for k, v in engine_kwargs(tier, model_path).items() if k not in THINKTIER_ONLY_ENGINE_ARGS}
    if tier.thinking:
        kwargs["reasoning_parser"] = tier.reasoning_parser  # reads the output up to the end string as `reasoning`
        template = thinking_chat_template(model_path, thinking_start(tier, model_path))
        if template is not None:
            kwargs["chat_template"] = template
    scaling = replica_scaling(tier)
    if tier.pool.accelerator == "gpu":
        return RayLLMSettings(
            model_path, model_id, kwargs, accelerator="gpu", accelerator_type=tier.pool.accelerator_type, scaling=scaling
        )
    env = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    threads = cpu_threads or tier.engine.cpu_threads
    if threads:
        env["VLLM_CPU_OMP_THREADS_BIND"] = threads
    return RayLLMSettings(model_path, model_id, kwargs, env=env, num_cpus=tier.pool.num_cpus, scaling=scaling)


def replica_scaling(tier: Tier) -> dict[str, Any]:
    """The tier's replica count; between min and max, Ray Serve's own autoscaling (its default target)."""
    return replica_count_options(tier.replicas)


def peer_options(policy: Policy, tier_name: str, model_id: str) -> RequestOptions:
    """What every request to the peer carries so that it spends what thinktier's one-budget pool spends: the tier's
    budget at the policy's default effort, the thinking part as vLLM's `thinking_token_budget` and the whole as
    `max_tokens` (vLLM counts thinking and answer against it)."""
    tier = policy.tiers[tier_name]
    budget = tier.budgets[policy.routing.default_effort]
    return RequestOptions(
        model=model_id,
        max_tokens=budget.thinking_tokens + budget.answer_tokens,
        thinking_token_budget=budget.thinking_tokens if tier.thinking else None,
    )


def serving_args(settings: RayLLMSettings) -> dict[str, Any]:
    """The `LLMServingArgs` (as the dict `build_openai_app` validates) for `settings`. The OpenAI ingress asks
    Ray for no CPU, like Ray Serve LLM's own request router: it is a thin proxy, and its default of one whole
    CPU does not fit beside the engine on a small machine."""
    return {"llm_configs": [llm_config(settings)], "ingress_deployment_config": {"ray_actor_options": {"num_cpus": 0}}}


def llm_config(settings: RayLLMSettings) -> dict[str, Any]:
    """The `LLMConfig` fields (as a dict `build_openai_app` validates) for `settings`."""
    config: dict[str, Any] = {
        "model_loading_config": {"model_id": settings.model_id, "model_source": settings.model_path},
        "engine_kwargs": settings.engine_kwargs,
        "deployment_config": {**settings.scaling, "request_router_config": {"request_router_class": PREFIX_AWARE_ROUTER}},
        "runtime_env": {"env_vars": settings.env},
    }
    if settings.accelerator == "cpu":
        config["accelerator_config"] = {"kind": "cpu"}
        config["placement_group_config"] = {"bundles": [{"CPU": settings.num_cpus}]}
    elif settings.accelerator_type:
        config["accelerator_type"] = settings.accelerator_type
    return config


class RayLLMApp:
    """Starts Ray, Ray Serve and the Ray Serve LLM OpenAI app on `port`; waits until the application is RUNNING
    (every engine replica started: its ingress lists the model at `/v1/models` long before) and lists the model;
    shuts everything down on exit. vLLM's engine metrics come out of Ray's metrics agent on
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
            app = build_openai_app(serving_args(self.settings))
            serve.run(app, name=self.APP_NAME, route_prefix="/", blocking=False)
            self._wait_ready()
        except BaseException:
            self._shutdown()
            raise
        return self

    def _wait_ready(self) -> None:
        from ray import serve

        deadline = time.monotonic() + self.ready_timeout_s
        last = "no answer yet"
        while time.monotonic() < deadline:
            app = serve.status().applications.get(self.APP_NAME)
            if app is not None and app.status == "DEPLOY_FAILED":
                raise RuntimeError(f"Ray Serve LLM failed to deploy: {app.message}")
            try:
                response = httpx.get(f"{self.url}/v1/models", timeout=5)
                listed = response.status_code == 200 and self.settings.model_id in response.text
                if listed and app is not None and app.status == "RUNNING":
                    return
                last = f"HTTP {response.status_code}: {response.text[:200]}; application {app.status if app else 'absent'}"
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
