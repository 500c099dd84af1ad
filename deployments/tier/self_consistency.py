"""Self-consistency: N samples of one prompt vote on the answer, and stop as soon as enough of them agree.

The samples are N engine requests with the same prompt, sent together. vLLM's prefix cache shares their prefill: it
registers a prompt's blocks as it schedules them, so requests scheduled in the same step read the KV their first
computes. Each sample recomputes only the prompt's last, partial KV block (measured on vLLM 0.32 for CPU: 8 samples
of a 901-token prompt computed 936 prompt tokens, as one request with n=8 did; `thinktier bench economy`). Separate
requests, unlike one request with `n`, can each be aborted: once `consensus` samples agree, the others are cancelled
and vLLM frees their KV at once.

Samples of one prompt tend to think about as long as each other, so when `consensus` of them agree the others are
near their ends too and aborting them saves little. Staged sampling (`staged`, adaptive self-consistency) starts only
`consensus` samples and starts another only when those still decoding can no longer bring the leading answer to
`consensus`: an agreeing prompt costs `consensus` samples, not all of them. A later sample still shares the prompt's
cached blocks, while the prefix cache keeps them.

The engine supplies how one sample decodes (`decode`) and, for free-text answers, how texts embed (`embed`); everything
here is orchestration, tested with fake decodes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace

from thinktier.deployments.tier.answers import Ballot, extract_answer, is_numeric
from thinktier.deployments.tier.protocol import HEARTBEAT_S, Economy, TierChunk, TierRequest

logger = logging.getLogger("ray.serve")
DecodeOne = Callable[[TierRequest], AsyncIterator[TierChunk]]
Embed = Callable[[list[str]], Awaitable[Sequence[Sequence[float]]]]


def sample_request(request: TierRequest, index: int) -> TierRequest:
    """Sample `index` of a request: its own engine request id and seed (a seeded request stays reproducible). The vote
    is the samples' early stop; certainty exit is for one-sample decodes."""
    seed = None if request.seed is None else request.seed + index
    return replace(request, request_id=f"{request.request_id}-s{index}", seed=seed, samples=1, consensus=1,
                   staged=False, certainty_exit=None)


@dataclass
class _Sample:
    index: int
    chunks: list[TierChunk] = field(default_factory=list)
    task: asyncio.Task[None] | None = None

    @property
    def started(self) -> bool:
        return self.task is not None

    @property
    def running(self) -> bool:
        return self.task is not None and not self.finished

    @property
    def finished(self) -> bool:
        return bool(self.chunks) and self.chunks[-1].finish_reason is not None

    @property
    def whole(self) -> TierChunk:
        return TierChunk.joined(self.chunks) if self.chunks else TierChunk()

    @property
    def tokens(self) -> int:
        last = self.chunks[-1] if self.chunks else TierChunk()
        return last.reasoning_tokens + last.answer_tokens


class _Similarity:
    """Free-text agreement: cosine similarity of embeddings at least `threshold` (embeddings are L2-normalised)."""

    def __init__(self, embed: Embed, threshold: float) -> None:
        self._embed = embed
        self._threshold = threshold
        self._vectors: dict[str, Sequence[float]] = {}

    async def learn(self, answer: str) -> None:
        """Embed `answer` before the ballot compares it (the ballot's comparison is synchronous)."""
        if answer in self._vectors or is_numeric(answer):
            return
        try:
            self._vectors[answer] = (await self._embed([answer]))[0]
        except Exception:  # the classifier is restarting: compare this answer as text
            logger.warning("self-consistency: could not embed an answer; comparing it as text", exc_info=True)

    def __call__(self, a: str, b: str) -> bool:
        va, vb = self._vectors.get(a), self._vectors.get(b)
        if va is None or vb is None:
            return False
        return sum(x * y for x, y in zip(va, vb, strict=True)) >= self._threshold


class Vote:
    """One self-consistent decode: start the samples, stream one as progress, count answers as samples finish."""

    def __init__(self, request: TierRequest, decode: DecodeOne, embed: Embed | None) -> None:
        self.request = request
        self._decode = decode
        self._similarity = (
            _Similarity(embed, request.text_similarity) if embed is not None and request.text_similarity else None
        )
        self.ballot = Ballot(similar=self._similarity)
        self.samples = [_Sample(i) for i in range(request.samples)]
        self._started = time.monotonic()
        self._queue: asyncio.Queue[tuple[int, TierChunk | BaseException]] = asyncio.Queue()

    async def _run(self, sample: _Sample) -> None:
        try:
            async for chunk in self._decode(sample_request(self.request, sample.index)):
                await self._queue.put((sample.index, chunk))
        except Exception as exc:  # handed to the consumer, which fails the whole request
            await self._queue.put((sample.index, exc))

    async def stream(self) -> AsyncIterator[TierChunk]:
        """Progress chunks (sample 0's reasoning, when the request streams; once it has ended, an empty chunk every
        `HEARTBEAT_S` while the other samples decode, so the stream never looks stuck), then the last chunk: the chosen
        sample's answer, every sample's tokens and the votes."""
        self._start(self.request.consensus if self.request.staged else len(self.samples))
        decided = False
        last_sent = time.monotonic()
        try:
            while not decided and any(s.running for s in self.samples):
                index, item = await self._queue.get()
                if isinstance(item, BaseException):
                    raise item
                sample = self.samples[index]
                sample.chunks.append(item)
                if self.request.progress and index == 0 and item.reasoning:
                    yield TierChunk(reasoning=item.reasoning)
                    last_sent = time.monotonic()
                elif self.request.progress and time.monotonic() - last_sent >= HEARTBEAT_S:
                    yield TierChunk()
                    last_sent = time.monotonic()
                if sample.finished:
                    decided = await self._count(sample)
                    if not decided and self.request.staged:
                        self._start(self._still_needed())
        finally:
            aborted = await self._cancel_unfinished()
        yield self._result(aborted, early=decided)

    def _start(self, count: int) -> None:
        """Start the next `count` samples not yet started (fewer where fewer are left)."""
        for sample in [s for s in self.samples if not s.started][:count]:
            sample.task = asyncio.create_task(self._run(sample))

    def _still_needed(self) -> int:
        """Samples to start so that the leading answer could still reach consensus if every running sample joined it."""
        leading = max(self.ballot.counts().values(), default=0)
        running = sum(s.running for s in self.samples)
        return max(0, self.request.consensus - leading - running)

    async def _count(self, sample: _Sample) -> bool:
        """Count a finished sample's answer; True once `consensus` samples agree."""
        answer = extract_answer(sample.whole.content)
        if answer is not None and self._similarity is not None:
            await self._similarity.learn(answer)
        agreeing = self.ballot.add(sample.index, answer)
        return agreeing >= self.request.consensus and not all(s.finished for s in self.samples)

    async def _cancel_unfinished(self) -> list[_Sample]:
        """Cancel the samples still decoding (their engine requests are aborted); the ones cancelled."""
        running = [s for s in self.samples if s.task is not None and not s.task.done()]
        for sample in running:
            assert sample.task is not None
            sample.task.cancel()
        for sample in running:
            assert sample.task is not None
            with contextlib.suppress(asyncio.CancelledError):
                await sample.task
        return [s for s in running if not s.finished]

    def _chosen(self) -> _Sample:
        leader = self.ballot.leader
        if leader is not None:
            return self.samples[leader[1][0]]
        return next((s for s in self.samples if s.finished), self.samples[0])

    def _result(self, aborted: list[_Sample], early: bool) -> TierChunk:
        chosen = self._chosen().whole
        started = [s for s in self.samples if s.started]
        wholes = [s.whole for s in started]
        budget = self.request.thinking_tokens + self.request.answer_tokens
        never_started = len(self.samples) - len(started)
        return TierChunk(
            reasoning="" if self.request.progress else chosen.reasoning,
            content=chosen.content,
            finish_reason=chosen.finish_reason or "stop",
            prompt_tokens=chosen.prompt_tokens,
            reasoning_tokens=sum(w.reasoning_tokens for w in wholes),
            answer_tokens=sum(w.answer_tokens for w in wholes),
            budget_forced=chosen.budget_forced,
            preemptions=sum(w.preemptions for w in wholes),
            first_token_s=min((w.first_token_s for w in wholes if w.first_token_s is not None), default=None),
            first_visible_s=time.monotonic() - self._started,  # the answer shows once the vote is decided
            economy=Economy(
                samples=len(started),
                samples_aborted=len(aborted),
                votes=self.ballot.counts(),
                majority=self.ballot.majority(len(started)),
                early_stop="consensus" if early else None,
                tokens_saved=sum(max(0, budget - s.tokens) for s in aborted) + never_started * budget,
            ),
        )
