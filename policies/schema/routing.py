"""How a request finds its tier and effort, and what happens when the reasoning tier is saturated or fails."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from thinktier.policies.schema.base import DEPLOY_TIME, DifficultyClass, Effort, StrictModel


class Thresholds(StrictModel):
    """Difficulty score (0 = trivial, 1 = olympiad) to tier and effort. Scores below `reasoning` go to the chat tier."""

    reasoning: float = Field(0.3, ge=0, le=1, description="Lowest score that thinks: below it a prompt is answered "
                           "with thinking off, on the chat tier, or on the reasoning tier at the low budget where there is "
                           "no chat tier.")
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
        "builtin:difficulty-v9", description="Trained head artifact, or 'builtin:<version>'.", json_schema_extra=DEPLOY_TIME
    )
    max_batch_size: int = Field(16, ge=1, description="Prompts scored together.", json_schema_extra=DEPLOY_TIME)
    batch_wait_timeout_s: float = Field(
        0.002, ge=0, description="How long a batch waits to fill.", json_schema_extra=DEPLOY_TIME
    )
    timeout_s: float = Field(
        1.0, gt=0, description="Longest wait for a prompt's score; past it the request is routed without one."
    )
    placement: Literal["deployment", "ingress"] = Field(
        "ingress",
        description="Where prompts are scored: 'ingress', a copy of the model in every Ingress replica, one prompt at a "
        "time on a thread of its own (about 3 ms of one core; about 0.5 GiB of memory per Ingress replica, torch "
        "included); 'deployment', the classifier's own Serve deployment, prompts batched (max_batch_size, "
        "batch_wait_timeout_s). The Serve call before the first token costs more than the scoring: on a 2-core CPU "
        "the streamed TTFT thinktier added was 15.4 ms (median of 3 runs) with the Ingress placement, 27.6 ms with "
        "the deployment and 9.0 ms with the classifier off (loadtest/results/overhead-classifier). The deployment "
        "runs either way: tier replicas embed self-consistency answers with it.",
        json_schema_extra=DEPLOY_TIME,
    )


def default_priority() -> dict[DifficultyClass, int]:
    """vLLM priority per difficulty class of a policy that sets none."""
    return {"easy": 0, "medium": 1, "hard": 2}


class Routing(StrictModel):
    """How a request finds its tier, effort and vLLM priority."""

    reasoning_tier: str = Field("reasoning", description="Tier that takes prompts that need thinking.")
    chat_tier: str | None = Field("chat", description="Tier that takes prompts that need none; null for a single pool.")
    default_effort: Effort = Field("medium", description="Effort when neither classifier nor request says.")
    classifier: Classifier = Field(default_factory=Classifier)
    thresholds: Thresholds = Field(default_factory=Thresholds)
    priority: dict[DifficultyClass, int] = Field(
        default_factory=default_priority,
        description="vLLM priority per class, the class of the request's effort (low: easy, medium: medium, high: hard; "
        "the chat tier: easy): lower is scheduled first and preempted last. On an H200 under KV pressure the default "
        "met every SLO, cut easy requests' p99 TTFVT 5.3x against FCFS and finished hard requests as early as FCFS on "
        "average (+0.1%); {easy: 0, medium: 1, hard: 1} was worse on every figure (loadtest/results/gpu-scaling).",
    )
    priority_order: Literal["class", "deadline"] = Field(
        "class",
        description="How a request's vLLM priority is set. class: from `priority`, by the class of its budget. "
        "deadline: earliest deadline first, the deadline being the request's arrival plus its class's TTFVT objective "
        "(slos.<class>.ttfvt_s; the chat tier's requests: easy), in milliseconds: a hard request that has waited most "
        "of its objective outranks an easy one that has just arrived. class is the default: in the simulator "
        "(loadtest/results/plan-deadline) the two were the same at capacity, and above it the deadline order collapsed "
        "as earliest-deadline-first does under overload (goodput 0.75x and 0.50x of class's at 1.5x and 2x load); on one "
        "H100 under KV pressure (loadtest/results/gpu-deadline) the two ordered 30 s bursts at 1x, 1.5x and 2x alike, "
        "since no deadlines crossed, and held for 120 s at 1.5x the deadline order collapsed there too: 805 SLOs met of "
        "1,465 against the class order's 1,034 (FCFS 206), easy TTFVT p99 80 s against 5.9 s.",
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
