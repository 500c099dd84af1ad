"""What the Ingress and a tier replica exchange: one decode job in, a stream of chunks out.

Kept apart from the engine so that the Ingress, the OpenAI shapes and the benchmarks speak it
without importing vLLM.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Literal

from thinktier.policies.schema import DifficultyClass, EarlyExit

HEARTBEAT_S = 5.0
"""How often a tier stream that has nothing to send yet (a request queued in a busy engine; a vote whose streamed
sample has ended) sends an empty chunk, so the Ingress's `server.tier_idle_timeout_s` does not cut it off: well within
any sensible value of it."""


class PromptTooLong(ValueError):
    """The rendered prompt is longer than the tier accepts (a client error)."""


class EngineDead(RuntimeError):
    """The replica's vLLM engine is dead (Serve replaces the replica); carries the replica's id so that the Ingress
    routes nothing more to it."""

    def __init__(self, replica: str) -> None:
        super().__init__(replica)  # the id alone in args: Ray pickles the exception back to the caller
        self.replica = replica

    def __str__(self) -> str:
        return f"the vLLM engine of replica {self.replica} is dead"


@dataclass(frozen=True)
class TierRequest:
    """One decode job for a tier, with the budgets the router decided."""

    request_id: str
    thinking_tokens: int
    answer_tokens: int
    max_prompt_tokens: int | None = None
    """Longest prompt accepted; the tier's policy limit when None (the ingress passes the live policy's)."""
    priority: int = 0
    difficulty: DifficultyClass = "medium"
    messages: tuple[dict[str, str], ...] | None = None
    prompt: str | None = None
    temperature: float = 0.7
    top_p: float = 1.0
    seed: int | None = None
    stop: tuple[str, ...] = ()
    cache_salt: str | None = None
    """Prefix-cache namespace: the engine reuses cached prompt blocks only between requests with the same salt (the
    ingress gives each tenant its own, so one tenant cannot learn from cache hits what another sent)."""
    samples: int = 1
    """Self-consistency: decodes of the prompt that vote on the answer."""
    consensus: int = 1
    """Agreeing samples that end the vote early (the others are aborted); `samples` decodes every one."""
    staged: bool = False
    """Start `consensus` samples, and another only when those decoding can no longer reach consensus."""
    text_similarity: float | None = None
    """Free-text answers agree at this embedding similarity (numbers compare by value); None: as normalised text."""
    certainty_exit: EarlyExit | None = None
    """Probe the answer during thinking and stop thinking once it is certain (one-sample decodes): the tier's settings,
    with the request's agreement count."""
    borrowed: bool = False
    """Another tier's request, run on capacity this tier lends: it thinks with its own budget even on a tier whose own
    requests do not think (one that serves the same reasoning model with empty_thinking)."""
    progress: bool = True
    """Self-consistency streamed: one sample's reasoning as progress, then the voted answer. False (a non-streamed
    request): the chosen sample's own reasoning with the answer."""


EarlyStop = Literal["consensus", "certainty"]


@dataclass
class Economy:
    """How a request spent its tokens: samples started and aborted, votes, and what an early stop saved."""

    samples: int = 1
    """Samples started (fewer than asked where staged sampling reached consensus first)."""
    samples_aborted: int = 0
    votes: dict[str, int] | None = None
    """Answer -> samples that gave it (an equivalent form counts for the first one written), largest first."""
    majority: bool = True
    """The chosen answer had more than half of the samples."""
    early_stop: EarlyStop | None = None
    tokens_saved: int = 0
    """Tokens not generated thanks to the early stop, estimated from the budget: each aborted sample's unspent budget
    and each never-started sample's whole budget, or the thinking budget left when certainty ended the thinking."""
    probes: int = 0
    """Certainty probes sent."""


@dataclass
class TierChunk:
    """A piece of the stream: new thinking and answer text; the last chunk carries the totals."""

    reasoning: str = ""
    content: str = ""
    finish_reason: Literal["stop", "length"] | None = None
    prompt_tokens: int = 0
    reasoning_tokens: int = 0
    answer_tokens: int = 0
    budget_forced: bool = False
    replica: str | None = None
    """The serving replica's id, on the first chunk (set by the Serve deployment)."""
    first_token_s: float | None = None
    """On the last chunk: seconds from the engine taking the request to its first token (thinking or answer)."""
    first_visible_s: float | None = None
    """On the last chunk: seconds from the engine taking the request to its first answer token."""
    economy: Economy | None = None
    """On the last chunk: what self-consistency and early stopping did (None when neither ran)."""
    preemptions: int = 0
    """On the last chunk: times the engine preempted the request (every sample's decodes), each paid by a recompute
    or a load from host memory on resume."""

    @classmethod
    def joined(cls, chunks: Iterable[TierChunk]) -> TierChunk:
        """Consecutive chunks as one: their texts in order, the replica of the first, the totals of the last."""
        parts = list(chunks)
        last = parts[-1]
        return cls(
            reasoning="".join(c.reasoning for c in parts),
            content="".join(c.content for c in parts),
            finish_reason=last.finish_reason,
            prompt_tokens=last.prompt_tokens,
            reasoning_tokens=last.reasoning_tokens,
            answer_tokens=last.answer_tokens,
            budget_forced=last.budget_forced,
            replica=next((c.replica for c in parts if c.replica is not None), None),
            first_token_s=last.first_token_s,
            first_visible_s=last.first_visible_s,
            economy=last.economy,
            preemptions=last.preemptions,
        )


async def collect(chunks: AsyncIterator[TierChunk]) -> TierChunk:
    """Join a whole stream into one chunk (non-streaming responses)."""
    return TierChunk.joined([chunk async for chunk in chunks])
