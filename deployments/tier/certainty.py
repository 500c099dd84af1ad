"""Certainty-based early exit (Dynasor's probing), without vLLM: when to probe, what a probe asks, when to stop.

A reasoning model often knows its answer long before it stops thinking. Every `interval_tokens` thinking tokens the
engine sends a short side request: the prompt, the thinking so far and a probe such as "... the final answer is
\\boxed{". It shares the whole prefix with the running decode, so the prefix cache makes it cost a few decode steps.
When the last `agree` probes give the same answer, the thinking is closed and the model answers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from thinktier.deployments.tier.answers import extract_answer, same_answer
from thinktier.policies.schema import EarlyExit


def probe_prompt(prompt_ids: Sequence[int], thinking_ids: Sequence[int], probe_ids: Sequence[int]) -> list[int]:
    """The side request's prompt: the decode's own prompt and thinking (a prefix-cache hit), then the probe."""
    return [*prompt_ids, *thinking_ids, *probe_ids]


def probe_answer(probe: str, continuation: str) -> str | None:
    """The answer a probe got: the probe opens the answer (e.g. with "\\boxed{"), the model's continuation fills it."""
    return extract_answer(probe + continuation)


@dataclass
class CertaintyTracker:
    """The probes of one decode so far, and whether they have become certain."""

    settings: EarlyExit
    answers: list[str | None] = field(default_factory=list)
    next_probe_at: int = 0

    def __post_init__(self) -> None:
        self.next_probe_at = self.settings.interval_tokens

    def due(self, thinking_tokens: int) -> bool:
        """Whether the thinking has grown by an interval since the last probe."""
        return thinking_tokens >= self.next_probe_at

    def record(self, answer: str | None, thinking_tokens: int) -> bool:
        """Add a probe's answer (taken at `thinking_tokens`); True once the last `agree` answers are one answer."""
        self.answers.append(answer)
        self.next_probe_at = thinking_tokens + self.settings.interval_tokens
        last = self.answers[-self.settings.agree :]
        return (
            len(last) == self.settings.agree
            and last[0] is not None
            and all(a is not None and same_answer(a, last[0]) for a in last[1:])
        )

    @property
    def probes(self) -> int:
        return len(self.answers)
