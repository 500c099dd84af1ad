"""One tier: a pool of identical vLLM replicas serving one model, with the rules that its parts fit together."""

from __future__ import annotations

from pydantic import Field, model_validator

from thinktier.policies.schema.autoscaling import Autoscaling, RouterWeights, Stragglers
from thinktier.policies.schema.base import DEPLOY_TIME, EFFORTS, Effort, StrictModel
from thinktier.policies.schema.budgets import Budget, EarlyExit, Voting, default_budgets
from thinktier.policies.schema.engine import EngineArgs
from thinktier.policies.schema.pool import Pool, Replicas

DEFAULT_REASONING_PARSER = "deepseek_r1"
LEGACY_DELIMITERS = {"think_start": "<think>", "think_end": "</think>"}
PROCESS_MEMORY_GIB = 2.0
"""Host memory a tier replica's engine process needs besides offloaded KV (Python, vLLM, tokenizer), GiB."""
"""Before `reasoning_parser`, a tier named its delimiters itself; policies of then (recorded runs among them) say these,
which are the default parser's, and load as they did."""


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
    empty_thinking: bool = Field(
        False,
        description="On a tier with thinking: false, end the prompt with an empty thinking section (opened and closed), "
        "so that a reasoning model answers at once (its thinking-off mode) instead of thinking in the visible answer. "
        "The delimiters come from reasoning_parser.",
        json_schema_extra=DEPLOY_TIME,
    )
    reasoning_parser: str = Field(
        DEFAULT_REASONING_PARSER,
        description="vLLM reasoning parser of the model (a name of vLLM's ReasoningParserManager: deepseek_r1, qwen3, "
        "...), whose start and end strings delimit the thinking section; each must be one token of the model's "
        "tokenizer, which the tier's engine checks when it starts.",
        json_schema_extra=DEPLOY_TIME,
    )
    pool: Pool = Field(default_factory=Pool, json_schema_extra=DEPLOY_TIME)
    replicas: Replicas = Field(default_factory=Replicas, json_schema_extra=DEPLOY_TIME)
    engine: EngineArgs = Field(default_factory=EngineArgs, json_schema_extra=DEPLOY_TIME)
    budgets: dict[Effort, Budget] = Field(default_factory=default_budgets, description="Budget per effort level.")
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

    @model_validator(mode="before")
    @classmethod
    def _legacy_delimiters(cls, data: object) -> object:
        if not isinstance(data, dict) or not LEGACY_DELIMITERS.keys() & data.keys():
            return data
        stated = {key: data[key] for key in LEGACY_DELIMITERS if key in data}
        default_parser = data.get("reasoning_parser", DEFAULT_REASONING_PARSER) == DEFAULT_REASONING_PARSER
        if default_parser and stated.items() <= LEGACY_DELIMITERS.items():
            return {key: value for key, value in data.items() if key not in LEGACY_DELIMITERS}
        key = next(iter(stated))
        raise ValueError(
            f"{key}: the thinking delimiters come from the tier's reasoning_parser (vLLM's parser of the model); "
            "remove think_start and think_end and set reasoning_parser, e.g. deepseek_r1 for <think>...</think>"
        )

    @model_validator(mode="after")
    def _fits(self) -> Tier:
        problems = self._budget_problems() + self._accelerator_problems() + self._offloading_problems()
        if problems:
            raise ValueError("\n".join(problems))  # one line per problem, each starting with its field path
        return self

    def request_tokens(self, budget: Budget) -> int:
        """The most tokens a request of this tier with `budget` can hold: max_prompt_tokens + thinking + answer + 1."""
        return self.max_prompt_tokens + budget.thinking_tokens + budget.answer_tokens + 1

    def _offloading_problems(self) -> list[str]:
        offloading = self.engine.kv_offloading
        problems = [f"engine.{problem}" for problem in offloading.problems()]
        need = offloading.size_gib + PROCESS_MEMORY_GIB
        if offloading.enabled and need > self.pool.memory_gib:
            problems.append(
                f"engine.kv_offloading.size_gib: {offloading.size_gib:g} GiB of offloaded KV and about "
                f"{PROCESS_MEMORY_GIB:g} GiB for the engine process do not fit pool.memory_gib ({self.pool.memory_gib:g}); "
                f"raise pool.memory_gib to at least {need:g} or lower size_gib"
            )
        return problems

    def _budget_problems(self) -> list[str]:
        missing = [e for e in EFFORTS if e not in self.budgets]
        problems = [f"budgets: every effort level needs a budget; missing {missing}"] if missing else []
        for effort, budget in self.budgets.items():
            need = self.request_tokens(budget)
            if need > self.engine.max_model_len:
                problems.append(
                    f"budgets.{effort}: max_prompt_tokens + thinking_tokens + answer_tokens + 1 = {need} "
                    f"exceeds engine.max_model_len ({self.engine.max_model_len}); lower the budget or raise max_model_len"
                )
            if not self.thinking and budget.thinking_tokens:
                problems.append(f"budgets.{effort}.thinking_tokens: must be 0 on a tier with thinking: false")
        if self.thinking and self.empty_thinking:
            problems.append("empty_thinking: applies to tiers with thinking: false (a thinking tier opens the section "
                            "itself); remove it or set thinking: false")
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
        if engine.kv_offloading.mode == "native":
            problems.append(
                "engine.kv_offloading: mode 'native' (vLLM's connector) offloads KV only from CUDA or XPU GPUs; "
                "use mode: preempted, which runs on CPU tiers too, or pool.accelerator: gpu"
            )
        if engine.kv_cache_memory_gib is None:
            problems.append(
                "engine.kv_cache_memory_gib: required on CPU tiers (vLLM would otherwise claim most of host RAM); "
                "e.g. kv_cache_memory_gib: 0.5"
            )
        return problems
