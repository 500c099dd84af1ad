"""The thinktier policy: the one file platform engineers edit.

Every knob of the service lives here, typed, with its default and its help
text. Validation, defaults, the Ray Serve config, the Helm values and the JSON
Schema for editors are all derived from these models; nothing restates them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator
from pydantic.fields import FieldInfo

Effort = Literal["low", "medium", "high"]
EFFORTS: tuple[Effort, ...] = ("low", "medium", "high")
DifficultyClass = Literal["easy", "medium", "hard"]
ANONYMOUS = "anonymous"
"""The tenant of requests without an API key."""
Accelerator = Literal["cpu", "gpu"]
KVCacheDType = Literal["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"]

DEPLOY_TIME: dict[str, JsonValue] = {"deploy_time": True}
"""`json_schema_extra` of a field that is built into the deployments when they start, so that a change to it takes
a redeploy; the live reloader (policies/watcher.py) derives its redeploy set from these marks. Unmarked fields are
read per request and apply live. The mark also shows in policy.schema.json as `"deploy_time": true`."""


def is_deploy_time(field: FieldInfo) -> bool:
    """Whether `field` carries the DEPLOY_TIME mark."""
    extra = field.json_schema_extra
    return isinstance(extra, dict) and extra.get("deploy_time") is True


class StrictModel(BaseModel):
    """Unknown keys are errors: a typo in a policy must not be silently ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class KVOffloading(StrictModel):
    """vLLM native CPU offloading of KV blocks (GPU only)."""

    size_gib: float = Field(0.0, ge=0, description="CPU memory per replica for offloaded KV, GiB; 0 disables offloading.")
    backend: Literal["native", "lmcache"] = Field("native", description="vLLM KV offloading backend.")

    @property
    def enabled(self) -> bool:
        return self.size_gib > 0


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
        "which looks at each new token once. 'vllm': vLLM's own thinking_token_budget, which in vLLM 0.24 rescans "
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


class Pool(StrictModel):
    """Where a tier's replicas run: the Ray resources of one replica and the Kubernetes node pool."""

    accelerator: Accelerator = Field("cpu", description="'gpu' replicas ask Ray for GPUs and run CUDA vLLM.")
    accelerator_type: str | None = Field(None, description="Ray accelerator type, e.g. 'H100' (GPU pools).")
    num_cpus: float = Field(1.0, gt=0, description="Ray CPUs per replica.")
    memory_gib: float = Field(4.0, gt=0, description="Host memory per replica, GiB (KV offload buffers included).")
    gpu_fraction: float = Field(
        1.0,
        gt=0,
        le=1,
        description="GPU pools: share of one GPU a replica asks Ray for. Below 1, replicas of several tiers share a GPU "
        "(e.g. a light chat tier beside a reasoning replica); needs engine.tensor_parallel_size 1 and "
        "engine.gpu_memory_utilization no larger than this share. On Kubernetes each pod still gets one whole GPU.",
    )
    node_selector: dict[str, str] = Field(default_factory=dict, description="Kubernetes node selector of the pool.")
    tolerations: list[dict[str, str]] = Field(default_factory=list, description="Kubernetes tolerations of the pool.")


class Replicas(StrictModel):
    """How many replicas of a tier run: the autoscaler moves between min and max."""

    min: int = Field(1, ge=0, description="Fewest replicas the autoscaler keeps.")
    max: int = Field(1, ge=1, description="Most replicas the autoscaler may start.")
    initial: int | None = Field(None, ge=0, description="Replicas at start; min when unset.")

    @model_validator(mode="after")
    def _ordered(self) -> Replicas:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must not exceed max ({self.max})")
        if self.initial is not None and not self.min <= self.initial <= self.max:
            raise ValueError(f"initial ({self.initial}) must lie within [min, max] = [{self.min}, {self.max}]")
        return self


class Budget(StrictModel):
    """What one request of an effort level may spend."""

    thinking_tokens: int = Field(ge=0, description="Most thinking tokens; at the cap the engine closes the thinking.")
    answer_tokens: int = Field(ge=1, description="Most visible answer tokens.")
    samples: int = Field(
        1, ge=1, le=16,
        description="Self-consistency: this many samples of the prompt (one prefill, shared through the prefix cache) "
        "vote on the answer; 1 decodes once.",
    )
    consensus: int | None = Field(
        None, ge=1, le=16,
        description="Early consensus: once this many samples agree, the others are aborted and their KV freed. A strict "
        "majority of samples when unset (3 of 4); equal to samples, every sample runs to its end.",
    )
    early_exit: bool = Field(
        False,
        description="Certainty-based early exit for one-sample decodes: probe the answer every early_exit.interval_tokens "
        "thinking tokens and end the thinking once the last early_exit.agree probes agree (the tier's early_exit).",
    )

    @model_validator(mode="after")
    def _consensus_within_samples(self) -> Budget:
        if self.consensus is not None and self.consensus > self.samples:
            raise ValueError(f"consensus ({self.consensus}) must not exceed samples ({self.samples})")
        return self

    def consensus_of(self, samples: int) -> int:
        """How many agreeing samples end a self-consistent decode of `samples` (the budget's, or fewer by request)."""
        return min(self.consensus, samples) if self.consensus else samples // 2 + 1


def _default_budgets() -> dict[Effort, Budget]:
    return {
        "low": Budget(thinking_tokens=256, answer_tokens=256),
        "medium": Budget(thinking_tokens=1024, answer_tokens=512),
        "high": Budget(thinking_tokens=4096, answer_tokens=1024),
    }


DYNASOR_PROBE = "... Oh, I suddenly got the answer to the whole problem, **Final Answer**\n\n\\[ \\boxed{"
"""The probe of Dynasor's certainty-based early exit: after it, models write their current final answer."""


class EarlyExit(StrictModel):
    """Certainty-based early exit (Dynasor): probe the current answer during thinking, in a short side request that shares
    the prefix; once the probes agree, close the thinking and let the model answer."""

    interval_tokens: int = Field(64, ge=4, description="Thinking tokens between two probes.")
    agree: int = Field(3, ge=2, le=16, description="End the thinking when this many consecutive probes give one answer.")
    probe: str = Field(DYNASOR_PROBE, min_length=1, description="Text appended to the thinking so far to ask for the answer.")
    probe_tokens: int = Field(16, ge=1, le=256, description="Most tokens a probe may generate.")


class Voting(StrictModel):
    """How self-consistency samples' answers are compared."""

    text_similarity: float | None = Field(
        0.9, gt=0, le=1,
        description="Free-text answers (not numbers) agree at this cosine similarity of the difficulty classifier's "
        "embeddings; null compares them as normalised text only. Math answers compare by value (1/2 = 0.5 = \\frac{1}{2}).",
    )


class Autoscaling(StrictModel):
    """Targets of the KV- and straggler-aware autoscaler (per tier)."""

    signal: Literal["kv_and_stragglers", "ongoing_requests"] = Field(
        "kv_and_stragglers",
        description="What the tier scales on: KV occupancy and stragglers (queue depth as a floor), or Ray Serve's "
        "default ongoing-requests policy (a baseline for comparisons).",
    )
    target_kv_occupancy: float = Field(0.7, gt=0, le=1, description="Scale up when mean KV occupancy stays above this.")
    scale_down_kv_occupancy: float = Field(0.3, ge=0, lt=1, description="Scale down only when KV occupancy stays below this.")
    max_stragglers_per_replica: float = Field(2, ge=0, description="Scale up when stragglers per replica pass this.")
    target_ongoing_requests: float = Field(8, gt=0, description="Queue-depth floor: replicas >= ongoing / this.")
    upscale_delay_s: float = Field(5, ge=0, description="Condition must hold this long before scaling up.")
    downscale_delay_s: float = Field(30, ge=0, description="Condition must hold this long before scaling down.")
    metrics_interval_s: float = Field(1.0, gt=0, description="How often replicas push their stats.")

    @model_validator(mode="after")
    def _hysteresis(self) -> Autoscaling:
        if self.scale_down_kv_occupancy >= self.target_kv_occupancy:
            raise ValueError(
                f"scale_down_kv_occupancy ({self.scale_down_kv_occupancy}) must be below "
                f"target_kv_occupancy ({self.target_kv_occupancy}) or the tier flaps"
            )
        return self


class Stragglers(StrictModel):
    """When a running request counts as a straggler."""

    thinking_tokens: int = Field(2048, ge=1, description="Past this many thinking tokens.")
    elapsed_s: float = Field(60, gt=0, description="Or running longer than this.")


class RouterWeights(StrictModel):
    """How the tier's request router scores its replicas for each request; the lowest score gets the request.

    Each weight is in units of "one more request in the replica's queue" (cluster/request_router.py)."""

    queue: float = Field(1.0, ge=0, description="Per request running on or queued at the replica.")
    kv: float = Field(
        2.0, ge=0, description="Times occupancy / headroom of the KV cache: 0.5 at half full, 2.3 at 70%, 49 at 98%."
    )
    straggler: float = Field(
        2.0, ge=0, description="Per straggler on the replica: it holds KV and a batch slot it will not release soon."
    )
    long_running: float = Field(
        3.0, ge=0, description="Per long (hard-class) request on the replica; counted for hard requests only."
    )


class Tier(StrictModel):
    """One pool of identical vLLM replicas serving one model: a Ray Serve deployment."""

    model: str = Field(
        description="Model folder, or 'builtin:<name>' for a model thinktier builds itself (builtin:smollm2-135m-think).",
        json_schema_extra=DEPLOY_TIME,
    )
    served_model_name: str | None = Field(
        None, description="Name clients use in 'model'; the tier's name when unset.", json_schema_extra=DEPLOY_TIME
    )
    thinking: bool = Field(
        True, description="Whether the tier writes a thinking section before the answer.", json_schema_extra=DEPLOY_TIME
    )
    think_start: str = Field("<think>", description="Token that opens the thinking section.", json_schema_extra=DEPLOY_TIME)
    think_end: str = Field("</think>", description="Token that closes the thinking section.", json_schema_extra=DEPLOY_TIME)
    pool: Pool = Field(default_factory=Pool, json_schema_extra=DEPLOY_TIME)
    replicas: Replicas = Field(default_factory=Replicas, json_schema_extra=DEPLOY_TIME)
    engine: EngineArgs = Field(default_factory=EngineArgs, json_schema_extra=DEPLOY_TIME)
    budgets: dict[Effort, Budget] = Field(default_factory=_default_budgets, description="Budget per effort level.")
    max_prompt_tokens: int = Field(1024, ge=1, description="Longest prompt accepted, tokens; longer ones get a 400.")
    autoscaling: Autoscaling = Field(default_factory=Autoscaling, json_schema_extra=DEPLOY_TIME)
    stragglers: Stragglers = Field(default_factory=Stragglers, json_schema_extra=DEPLOY_TIME)
    router_weights: RouterWeights = Field(default_factory=RouterWeights, json_schema_extra=DEPLOY_TIME)
    early_exit: EarlyExit = Field(default_factory=EarlyExit)
    voting: Voting = Field(default_factory=Voting)
    normalize_prompts: bool = Field(
        True,
        description="Normalise whitespace that does not change meaning (line endings, trailing spaces, runs of blank "
        "lines) in system prompts and earlier turns, so that drift between clients does not cost prefix-cache hits.",
        json_schema_extra=DEPLOY_TIME,
    )

    @model_validator(mode="after")
    def _fits(self) -> Tier:
        problems = self._budget_problems() + self._accelerator_problems()
        if problems:
            raise ValueError("\n".join(problems))  # one line per problem, each starting with its field path
        return self

    def _budget_problems(self) -> list[str]:
        missing = [e for e in EFFORTS if e not in self.budgets]
        problems = [f"budgets: every effort level needs a budget; missing {missing}"] if missing else []
        for effort, budget in self.budgets.items():
            need = self.max_prompt_tokens + budget.thinking_tokens + budget.answer_tokens + 1
            if need > self.engine.max_model_len:
                problems.append(
                    f"budgets.{effort}: max_prompt_tokens + thinking_tokens + answer_tokens + 1 = {need} "
                    f"exceeds engine.max_model_len ({self.engine.max_model_len}); lower the budget or raise max_model_len"
                )
            if not self.thinking and budget.thinking_tokens:
                problems.append(f"budgets.{effort}.thinking_tokens: must be 0 on a tier with thinking: false")
        return problems

    def _gpu_problems(self) -> list[str]:
        engine, share = self.engine, self.pool.gpu_fraction
        problems = []
        if engine.cpu_threads is not None:
            problems.append("engine.cpu_threads: applies to CPU tiers only; remove it or set pool.accelerator: gpu")
        if share < 1 and engine.tensor_parallel_size != 1:
            problems.append(
                f"pool.gpu_fraction: a replica can share a GPU only with engine.tensor_parallel_size 1 "
                f"(got {engine.tensor_parallel_size}); set gpu_fraction: 1"
            )
        if engine.gpu_memory_utilization > share:
            problems.append(
                f"engine.gpu_memory_utilization: {engine.gpu_memory_utilization} exceeds pool.gpu_fraction ({share}); "
                f"a replica that shares its GPU may claim at most its share of the memory"
            )
        return problems

    def _accelerator_problems(self) -> list[str]:
        engine = self.engine
        if self.pool.accelerator == "gpu":
            return self._gpu_problems()
        problems = []
        if self.pool.gpu_fraction != 1:
            problems.append("pool.gpu_fraction: applies to GPU pools only; remove it or set pool.accelerator: gpu")
        if engine.kv_offloading.enabled:
            problems.append(
                "engine.kv_offloading: vLLM offloads KV to CPU memory only from CUDA or XPU GPUs; "
                "set kv_offloading.size_gib: 0 or pool.accelerator: gpu"
            )
        if engine.kv_cache_memory_gib is None:
            problems.append(
                "engine.kv_cache_memory_gib: required on CPU tiers (vLLM would otherwise claim most of host RAM); "
                "e.g. kv_cache_memory_gib: 0.5"
            )
        return problems


class Thresholds(StrictModel):
    """Difficulty score (0 = trivial, 1 = olympiad) to tier and effort. Scores below `reasoning` go to the chat tier."""

    reasoning: float = Field(0.3, ge=0, le=1, description="Lowest score sent to the reasoning tier.")
    medium: float = Field(0.6, ge=0, le=1, description="Lowest score given medium effort.")
    high: float = Field(0.8, ge=0, le=1, description="Lowest score given high effort.")

    @model_validator(mode="after")
    def _ordered(self) -> Thresholds:
        if not self.reasoning <= self.medium <= self.high:
            raise ValueError(
                f"thresholds must be in order reasoning <= medium <= high; got {self.reasoning}, {self.medium}, {self.high}"
            )
        return self


class Classifier(StrictModel):
    """The difficulty classifier: a sentence embedder and a trained head, batched on the CPU."""

    enabled: bool = Field(
        True, description="Score prompts with the difficulty classifier; otherwise route on the request.",
        json_schema_extra=DEPLOY_TIME,
    )
    artifact: str = Field(
        "builtin:difficulty-v5", description="Trained head artifact, or 'builtin:<version>'.", json_schema_extra=DEPLOY_TIME
    )
    max_batch_size: int = Field(16, ge=1, description="Prompts scored together.", json_schema_extra=DEPLOY_TIME)
    batch_wait_timeout_s: float = Field(
        0.002, ge=0, description="How long a batch waits to fill.", json_schema_extra=DEPLOY_TIME
    )
    timeout_s: float = Field(
        1.0, gt=0, description="Longest wait for a prompt's score; past it the request is routed without one."
    )


class Routing(StrictModel):
    """How a request finds its tier, effort and vLLM priority."""

    reasoning_tier: str = Field("reasoning", description="Tier that takes prompts that need thinking.")
    chat_tier: str | None = Field("chat", description="Tier that takes prompts that need none; null for a single pool.")
    default_effort: Effort = Field("medium", description="Effort when neither classifier nor request says.")
    classifier: Classifier = Field(default_factory=Classifier)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    priority: dict[DifficultyClass, int] = Field(
        default_factory=lambda: {"easy": 0, "medium": 1, "hard": 2},
        description="vLLM priority per class, the class of the request's effort (low: easy, medium: medium, high: hard; "
        "the chat tier: easy): lower is scheduled first and preempted last. On an H200 under KV pressure the default "
        "met every SLO, cut easy requests' p99 TTFVT 5.3x against FCFS and finished hard requests as early as FCFS on "
        "average (+0.1%); {easy: 0, medium: 1, hard: 1} was worse on every figure (loadtest/results/gpu-scaling).",
    )


class Degradation(StrictModel):
    """What the router does when the reasoning tier is saturated (in order), or fails."""

    saturated_kv_occupancy: float = Field(0.95, gt=0, le=1, description="Tier counts as saturated at this KV occupancy...")
    saturated_waiting_requests: int = Field(16, ge=0, description="...or with this many requests waiting per replica.")
    shrink_budget_to: Effort | None = Field("low", description="First step: serve with this effort's budget.")
    fallback_to_chat: bool = Field(True, description="Second step: serve on the chat tier with thinking off.")
    fallback_on_failure: bool = Field(
        True,
        description="When the reasoning tier fails a request before anything was sent (after one retry), or has no "
        "live replica, serve it on the chat tier with thinking off (x-thinktier-degraded: chat:tier_failed, or "
        "chat:tier_down) instead of failing it.",
    )
    retry_after_s: int = Field(5, ge=1, description="Retry-After of the 429 when no tier can take the request.")


class SLO(StrictModel):
    """Latency objectives of one difficulty class; goodput counts requests that meet both."""

    ttfvt_s: float = Field(gt=0, description="Time to first visible (answer) token, seconds.")
    e2e_s: float = Field(gt=0, description="Request start to last token, seconds.")

    def met(self, ttfvt_s: float | None, e2e_s: float | None) -> bool:
        """Whether a request with these latencies meets both objectives; one that never showed an answer token
        (`ttfvt_s` None) or never finished (`e2e_s` None) misses."""
        return ttfvt_s is not None and e2e_s is not None and ttfvt_s <= self.ttfvt_s and e2e_s <= self.e2e_s


def _default_slos() -> dict[DifficultyClass, SLO]:
    return {
        "easy": SLO(ttfvt_s=2, e2e_s=10),
        "medium": SLO(ttfvt_s=20, e2e_s=60),
        "hard": SLO(ttfvt_s=60, e2e_s=180),
    }


ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
"""An environment variable's name (where a secret comes from: the policy never holds one)."""


class Tenant(StrictModel):
    """A client of the service, known by its API key; the tenant named `anonymous` (no key) sets the limits of
    requests without a key."""

    api_key_env: str | None = Field(
        None,
        pattern=ENV_NAME,
        description="Environment variable holding the tenant's API key (never the key itself); required for every "
        "tenant but 'anonymous', which has none.",
    )
    max_concurrent_requests: int = Field(64, ge=1, description="Requests in flight at once; beyond, 429.")
    max_effort: Effort = Field("high", description="Highest effort the tenant may ask for.")


class Server(StrictModel):
    """The HTTP endpoint: Serve's proxy, the Ingress replicas behind it, and how streams reach them."""

    host: str = Field("127.0.0.1", description="HTTP bind address.", json_schema_extra=DEPLOY_TIME)
    port: int = Field(8000, ge=1, le=65535, description="HTTP port.", json_schema_extra=DEPLOY_TIME)
    max_body_bytes: int = Field(1_000_000, ge=1024, description="Largest request body accepted.")
    allow_anonymous: bool | None = Field(
        None,
        description="Serve requests without an API key as tenant 'anonymous' (held to tenants.anonymous when the "
        "policy has that entry). Unset: only while no tenant has an API key; once one does, anonymous access needs "
        "an explicit true.",
    )
    metrics_api_key_env: str | None = Field(
        None,
        pattern=ENV_NAME,
        description="Environment variable holding the key that GET /metrics requires (Authorization: Bearer <key>); "
        "unset: /metrics is open. Health endpoints stay open either way.",
    )
    body_read_timeout_s: float = Field(
        30, gt=0, description="Longest time a client may take to send its request body; past it, 408 (a body "
        "trickled byte by byte does not hold the Ingress)."
    )
    tier_timeout_s: float = Field(
        600,
        gt=0,
        description="Longest a request may spend on its tier, streamed or not; past it the client gets a 504 (or an "
        "SSE error event) and the engine request is aborted. Serve's own request_timeout_s is set a little above it "
        "as a backstop.",
        json_schema_extra=DEPLOY_TIME,
    )
    tier_idle_timeout_s: float = Field(
        60, gt=0, description="Longest wait for a tier's first chunk and between two chunks of a stream; a stuck "
        "engine ends the request with a 504 (or an SSE error event) instead of holding its slot."
    )
    drain_timeout_s: float = Field(
        30,
        ge=0,
        description="When the service stops (`thinktier up` gets SIGTERM or Ctrl-C, the application is deleted, Serve "
        "scales a replica down or replaces it), requests in flight get this long to finish; a stream still running then ends "
        "with an SSE error event and [DONE]. Ray Serve's graceful_shutdown_timeout_s of the tier replicas; the Ingress "
        "gets a few seconds more so that it can send that event.",
        json_schema_extra=DEPLOY_TIME,
    )
    load_board_timeout_s: float = Field(
        2, gt=0, description="Deadline of the Ingress's calls to the load board (routing view, /readyz, /metrics)."
    )
    log_encoding: Literal["json", "text"] = Field(
        "json",
        description="Ray Serve's log encoding for every deployment: 'json' writes one object per line with the request "
        "id (the x-request-id every response carries), deployment and replica; prompts are never logged.",
        json_schema_extra=DEPLOY_TIME,
    )
    ingress_replicas: Replicas = Field(
        default_factory=Replicas,
        description="Ingress replicas (HTTP parsing, routing, SSE framing); between min and max they follow the "
        "requests in flight (ingress_target_ongoing_requests each).",
        json_schema_extra=DEPLOY_TIME,
    )
    ingress_target_ongoing_requests: float = Field(
        128,
        gt=0,
        description="Requests in flight per Ingress replica that the front door scales towards.",
        json_schema_extra=DEPLOY_TIME,
    )
    http_proxy: Literal["serve", "haproxy"] = Field(
        "serve",
        description="What carries HTTP to the Ingress replicas: Ray Serve's proxy actor (one Python process per node), "
        "or 'haproxy': Ray Serve's HAProxy mode, where HAProxy balances over Ingress replicas that serve HTTP "
        "themselves (direct ingress), so the front door grows with ingress_replicas.",
        json_schema_extra=DEPLOY_TIME,
    )
    stream_interval_ms: float = Field(
        50, ge=0, le=1000,
        description="A stream's tokens leave the tier replica in batches at most this far apart, so the Ingress and "
        "proxy handle one message per batch, not per token; the first token and the first answer token go at once. "
        "0 sends every engine step on its own.",
        json_schema_extra=DEPLOY_TIME,
    )


class Policy(StrictModel):
    """The whole policy file."""

    version: Literal[1] = Field(1, description="Policy schema version.")
    server: Server = Field(default_factory=Server)
    tiers: dict[str, Tier] = Field(description="Tiers by name; each becomes a Ray Serve deployment.")
    routing: Routing = Field(default_factory=Routing)
    degradation: Degradation = Field(default_factory=Degradation)
    slos: dict[DifficultyClass, SLO] = Field(default_factory=_default_slos)
    tenants: dict[str, Tenant] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _routes_exist(self) -> Policy:
        names = sorted(self.tiers)
        problems = []
        routes = (("routing.reasoning_tier", self.routing.reasoning_tier), ("routing.chat_tier", self.routing.chat_tier))
        for field, tier in routes:
            if tier is not None and tier not in self.tiers:
                problems.append(f"{field}: tier {tier!r} does not exist; tiers are {names}")
        chat = self.routing.chat_tier
        if chat in self.tiers and self.tiers[chat].thinking:
            problems.append(f"routing.chat_tier: tier {chat!r} must have thinking: false")
        served = [t.served_model_name or n for n, t in self.tiers.items()]
        if len(set(served)) != len(served):
            problems.append(f"tiers: served model names must be unique; got {served}")
        problems += self._tenant_problems()
        if problems:
            raise ValueError("\n".join(problems))
        return self

    def _tenant_problems(self) -> list[str]:
        problems = [
            f"tenants.{name}.api_key_env: required (the environment variable that holds the tenant's API key)"
            for name, tenant in self.tenants.items() if name != ANONYMOUS and tenant.api_key_env is None
        ]
        anonymous = self.tenants.get(ANONYMOUS)
        if anonymous is not None and anonymous.api_key_env is not None:
            problems.append(f"tenants.{ANONYMOUS}.api_key_env: the anonymous tenant is the one without a key; remove it")
        if anonymous is not None and not self.anonymous_allowed:
            problems.append(
                f"tenants.{ANONYMOUS}: sets limits of requests without a key, which this policy refuses; "
                "set server.allow_anonymous: true or remove the entry"
            )
        return problems

    @property
    def keyed_tenants(self) -> dict[str, Tenant]:
        """The tenants known by an API key (all but `anonymous`)."""
        return {name: tenant for name, tenant in self.tenants.items() if tenant.api_key_env is not None}

    @property
    def anonymous_allowed(self) -> bool:
        """Requests without a key are served: as the policy says, or when it does not say, while no tenant has a key."""
        allowed = self.server.allow_anonymous
        return not self.keyed_tenants if allowed is None else allowed

    def served_name(self, tier: str) -> str:
        return self.tiers[tier].served_model_name or tier

    def tier_for_model(self, model: str) -> str | None:
        for name in self.tiers:
            if model in (name, self.served_name(name)):
                return name
        return None
