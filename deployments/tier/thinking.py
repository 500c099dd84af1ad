"""The thinking section, without vLLM: how a prompt opens it, what the budgets mean to the sampler,
and how decoded tokens split into reasoning and answer.

The engine (deployments/tier/engine.py) supplies the delimiters of its model (from vLLM's reasoning parser:
deployments/tier/reasoning_delimiters.py), its tokenizer and the engine's outputs; everything here is arithmetic on
ids and text, tested with any ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from thinktier.deployments.tier.protocol import TierChunk
from thinktier.policies.schema import BudgetProcessor

Finish = Literal["stop", "length"]


@dataclass(frozen=True)
class ThinkingDelimiters:
    """The strings that open and close a thinking section, each one token of the model's tokenizer."""

    start: str
    end: str
    start_id: int
    end_id: int


class Encoder(Protocol):
    def encode(self, text: str, *, add_special_tokens: bool = ...) -> list[int]: ...


@dataclass(frozen=True)
class ThinkingTokens:
    """The delimiters of a thinking section as token ids of one tokenizer."""

    open_ids: tuple[int, ...]
    """The section's opening as a prompt ends with it: the start token and a newline."""
    close_ids: tuple[int, ...]
    """What closes the section when the engine has to (the end token and a blank line)."""
    end_id: int | None
    """The end token, which splits reasoning from answer in the output (None on a tier without thinking)."""

    @classmethod
    def of(cls, tokenizer: Encoder, delimiters: ThinkingDelimiters) -> ThinkingTokens:
        return cls(
            open_ids=tuple(tokenizer.encode(delimiters.start + "\n", add_special_tokens=False)),
            close_ids=tuple(tokenizer.encode(delimiters.end + "\n\n", add_special_tokens=False)),
            end_id=delimiters.end_id,
        )


NO_THINKING = ThinkingTokens(open_ids=(), close_ids=(), end_id=None)
"""A tier without thinking: no section to open, close or split at."""


def open_section(prompt_ids: Sequence[int], tokens: ThinkingTokens, already_open: bool, thinking_budget: int) -> list[int]:
    """A thinking tier's prompt: the section opened (unless the chat template did), and closed at once when the
    budget is zero, so the model answers directly (the "thinking off" mode of R1-style models)."""
    ids = list(prompt_ids)
    if not already_open:
        ids += tokens.open_ids
    if thinking_budget == 0:
        ids += tokens.close_ids
    return ids


THINKING_BUDGET_ARG = "thinktier_thinking_budget"
"""The `SamplingParams.extra_args` key read by deployments/tier/thinking_budget.py's logits processor."""


@dataclass(frozen=True)
class DecodeLimits:
    """What one engine request may generate."""

    max_tokens: int
    thinking_tokens: int | None = None
    """Thinking tokens the decode may write before the end token is forced (None: no section to end)."""
    open_len: int = 0
    """Tokens of the section's opening in the prompt."""

    def sampler_args(self, processor: BudgetProcessor, tokens: ThinkingTokens) -> dict[str, Any]:
        """SamplingParams keyword arguments that end the section at its budget, for the tier's budget processor. The
        project's processor writes the whole close (the end token and a blank line, as the model writes it after a
        section it ends itself), so that a section cut mid-line still leads into the answer; vLLM's writes the end
        token alone."""
        if self.thinking_tokens is None or tokens.end_id is None:
            return {}
        if processor == "vllm":
            # vLLM counts the prompt's tokens after the start token (the newline) towards its budget.
            return {"thinking_token_budget": self.thinking_tokens + self.open_len - 1}
        return {"extra_args": {THINKING_BUDGET_ARG: {"tokens": self.thinking_tokens, "close_ids": list(tokens.close_ids)}}}


def decode_limits(
    thinking_tokens: int, answer_tokens: int, thinking: bool, open_len: int, room: int | None = None
) -> DecodeLimits:
    """The budgets as sampler limits. `room`: most tokens that still fit the context (the answer decode that
    follows a section the model ended early)."""
    if not thinking:
        return DecodeLimits(answer_tokens if room is None else min(answer_tokens, room))
    max_tokens = answer_tokens + thinking_tokens + 1  # the end token is one more output token
    return DecodeLimits(max_tokens if room is None else min(max_tokens, room), thinking_tokens, open_len)


@dataclass
class ReasoningSplitter:
    """Where one request's decoding stands, across its engine requests: thinking or answering, what each
    has spent, when each began, and how it ended."""

    in_thinking: bool
    end_id: int | None
    thinking_budget: int
    answer_budget: int
    thinking_ids: list[int] = field(default_factory=list)
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    budget_forced: bool = False
    finish: Finish | None = None
    first_token_s: float | None = None
    first_visible_s: float | None = None

    def feed(
        self, ids: Sequence[int], text: str, decode: Callable[[Sequence[int]], str], elapsed_s: float,
        finished: bool, finish_reason: str | None,
    ) -> TierChunk:
        """The new tokens of one engine output as reasoning and/or answer text; sets `finish` when the request ends
        here (the engine finished, or the answer budget is spent)."""
        chunk = TierChunk()
        if self.in_thinking and self.end_id in ids:
            cut = ids.index(self.end_id)
            self.reasoning_tokens += cut
            self.thinking_ids += ids[:cut]
            self.budget_forced = self.reasoning_tokens >= self.thinking_budget
            chunk.reasoning = decode(ids[:cut])
            chunk.content = self._answer(ids[cut + 1 :], None, decode)
            self.in_thinking = False
        elif self.in_thinking:
            self.reasoning_tokens += len(ids)
            self.thinking_ids += ids
            chunk.reasoning = text
        else:
            chunk.content = self._answer(ids, text, decode)
        chunk.reasoning_tokens, chunk.answer_tokens = self.reasoning_tokens, self.answer_tokens  # so far
        if self.first_token_s is None and (chunk.reasoning or chunk.content):
            self.first_token_s = elapsed_s
        if self.first_visible_s is None and chunk.content:
            self.first_visible_s = elapsed_s
        if self.answer_tokens >= self.answer_budget and not finished:
            self.finish = "length"
        elif finished:
            self.finish = "length" if finish_reason == "length" else "stop"
        return chunk

    def _answer(self, ids: Sequence[int], text: str | None, decode: Callable[[Sequence[int]], str]) -> str:
        """The answer text of `ids` (`text` when the engine decoded it already), cut where the answer budget ends: one
        engine output can carry several tokens (the engine merges deltas its consumer has not taken yet)."""
        room = max(0, self.answer_budget - self.answer_tokens)
        if len(ids) > room:
            ids, text = ids[:room], None
        self.answer_tokens += len(ids)
        return decode(ids) if text is None else text

    @property
    def ended_in_thinking(self) -> bool:
        """The model ended its turn inside the section (before the budget; small or untuned models do)."""
        return self.in_thinking and self.finish == "stop"

    def answer_after_thinking(self, prompt_ids: Sequence[int], tokens: ThinkingTokens) -> list[int]:
        """The prompt of a second decode that answers: the first one's prompt and thinking, with the section closed."""
        self.in_thinking, self.finish = False, None
        return [*prompt_ids, *self.thinking_ids, *tokens.close_ids]

    def totals(self, prompt_tokens: int) -> TierChunk:
        """The stream's last chunk: how it ended and what it spent."""
        return TierChunk(
            finish_reason=self.finish or "stop",
            prompt_tokens=prompt_tokens,
            reasoning_tokens=self.reasoning_tokens,
            answer_tokens=self.answer_tokens,
            budget_forced=self.budget_forced,
            first_token_s=self.first_token_s,
            first_visible_s=self.first_visible_s,
        )
