"""What the router decides for one request, and how that decision is shown to clients."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from thinktier.policies.schema import DifficultyClass, Effort

HEADER_PREFIX = "x-thinktier-"


@dataclass(frozen=True)
class DifficultyScore:
    """The classifier's view of a prompt: a score in [0, 1] and class probabilities."""

    score: float
    probs: dict[DifficultyClass, float]
    model_version: str
    stage: Literal["fast", "whole"] = "whole"
    """Which head scored it: the fast one alone (no embedding; the prompt was clear from how it is written) or the whole
    one (deployments/classifier/difficulty.py)."""

    @property
    def label(self) -> DifficultyClass:
        return max(self.probs, key=lambda c: self.probs[c])


@dataclass(frozen=True)
class RoutingRequest:
    """The parts of a client request the router looks at."""

    prompt: str
    model: str | None = None
    reasoning_effort: Effort | None = None
    max_thinking_tokens: int | None = None
    max_answer_tokens: int | None = None
    samples: int | None = None
    tenant: str = "anonymous"
    thinking_off: bool = False
    """The caller asked for no thinking (reasoning_effort none/minimal, or thinking: false)."""
    early_stop: bool = True
    """False: every sample runs to its end and the thinking to its budget (no consensus stop, no certainty exit)."""
    early_stop_agree: int | None = None
    """Certainty exit needs at least this many agreeing probes (it can tighten the policy's, never loosen it)."""
    arrival_s: float = 0.0
    """When the request arrived, in seconds on a clock every Ingress replica shares (time.time(); the simulator's own
    clock in `thinktier plan`): the deadline order counts each request's deadline from it."""


@dataclass(frozen=True)
class Decision:
    """Tier, budgets and scheduling of one request, with the reason for each choice."""

    tier: str
    effort: Effort
    difficulty: DifficultyClass
    thinking_tokens: int
    answer_tokens: int
    samples: int
    priority: int
    reason: str
    score: float | None = None
    degraded: str | None = None
    notes: tuple[str, ...] = field(default_factory=tuple)
    consensus: int = 1
    """Agreeing samples that stop the others; `samples` when nothing stops early."""
    staged: bool = False
    """Samples start `consensus` at a time, more only when needed (the budget's `staged`)."""
    certainty_agree: int | None = None
    """Agreeing probes that end the thinking (certainty exit); None when it is off."""
    home: str | None = None
    """The tier whose request this is, when it runs on capacity `tier` lends (policy `lending`); None otherwise."""

    @property
    def home_tier(self) -> str:
        """The tier whose budgets, prompt limit and voting settings the request has."""
        return self.home or self.tier

    def headers(self) -> dict[str, str]:
        """Response headers that make the decision visible to the client."""
        headers = {
            "tier": self.tier,
            "effort": self.effort,
            "difficulty": self.difficulty,
            "thinking-budget": str(self.thinking_tokens),
            "answer-budget": str(self.answer_tokens),
            "samples": str(self.samples),
            "priority": str(self.priority),
            "reason": self.reason,
        }
        if self.score is not None:
            headers["difficulty-score"] = f"{self.score:.4f}"
        if self.degraded:
            headers["degraded"] = self.degraded
        if self.home:
            headers["borrowed"] = self.home
        return {HEADER_PREFIX + k: v for k, v in headers.items()}
