"""Measures the behaviours a reasoning model must show, on thinktier's own TierEngine (what a tier replica runs).

The same code paths as in serving: the chat template and the opened thinking section, the thinking budget processor
that closes the section at its budget, the answer decode after it, and self-consistency's vote. Phases, each over
seeded problems of the task family (training/reasoner/tasks.py) per difficulty class:

- full: one sample with thinking up to the context (temperature 0.6): thinking tokens, accuracy, and the overthinking
  after the result was first stated ("That makes X.");
- off: thinking off (a zero budget closes the section in the prompt), greedy: accuracy;
- budget: thinking budgets from a few tokens to more than any problem needs: accuracy, and whether an answer came;
- vote: five samples voting (self-consistency): the voted answer's accuracy against the samples' own.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tqdm import tqdm

from thinktier.deployments.tier.answers import extract_answer
from thinktier.deployments.tier.protocol import TierChunk, TierRequest, collect
from thinktier.policies.schema import DifficultyClass
from thinktier.training.reasoner.tasks import ChainProblem
from thinktier.training.reasoner.traces import RESULT

if TYPE_CHECKING:
    from thinktier.deployments.tier.engine import TierEngine

FOUND = re.compile(re.escape(RESULT) + r"\d+\.\n")
"""The line where the model first states its result: what follows it is checking (overthinking)."""
PHASES = ("full", "off", "budget", "vote")
Problems = Sequence[tuple[DifficultyClass, ChainProblem]]


@dataclass(frozen=True)
class BehaviourSettings:
    per_class: int = 30
    temperature: float = 0.6
    answer_tokens: int = 32
    budgets: tuple[int, ...] = (16, 64, 128, 256, 512, 1024, 2048, 4096)
    budget_per_class: int = 15
    votes: int = 5
    vote_per_class: int = 15
    concurrency: int = 32
    seed: int = 0
    phases: tuple[str, ...] = PHASES


@dataclass
class Row:
    phase: str
    difficulty: DifficultyClass
    count: int
    budget: int
    thinking_tokens: int
    correct: bool
    answered: bool
    """The visible answer holds a boxed number."""
    budget_forced: bool
    overthinking_tokens: int | None = None
    """full: thinking tokens after the result was first stated (None when it never was)."""
    sample_accuracy: float | None = None
    """vote: the share of the samples that were right (the expected accuracy of one sample)."""


class BehaviourBench:
    def __init__(self, engine: TierEngine, settings: BehaviourSettings) -> None:
        self.engine = engine
        self.settings = settings
        self._limit = asyncio.Semaphore(settings.concurrency)
        tier = engine.tier
        self.most_thinking = tier.engine.max_model_len - tier.max_prompt_tokens - settings.answer_tokens - 1
        """The largest budget the context holds: "full thinking" is never cut by anything but the model."""

    def _request(self, rid: str, problem: ChainProblem, thinking: int, **changes: Any) -> TierRequest:
        fields: dict[str, Any] = {
            "request_id": rid, "thinking_tokens": thinking, "answer_tokens": self.settings.answer_tokens,
            "messages": ({"role": "user", "content": problem.prompt},), "temperature": self.settings.temperature,
            "progress": False,
        }
        return TierRequest(**(fields | changes))

    def _overthinking(self, reasoning: str) -> int | None:
        found = FOUND.search(reasoning)
        if found is None:
            return None
        return len(self.engine.tokenizer.encode(reasoning[found.end():], add_special_tokens=False))

    async def _one(self, rid: str, phase: str, difficulty: DifficultyClass, problem: ChainProblem, budget: int,
                   **changes: Any) -> Row:
        async with self._limit:
            whole: TierChunk = await collect(self.engine.generate(self._request(rid, problem, budget, **changes)))
        row = Row(phase, difficulty, problem.count, budget, whole.reasoning_tokens, problem.is_correct(whole.content),
                  "boxed" in whole.content and extract_answer(whole.content) is not None, whole.budget_forced)
        if phase == "full":
            row.overthinking_tokens = self._overthinking(whole.reasoning)
        if whole.economy is not None and whole.economy.votes:
            right = sum(n for answer, n in whole.economy.votes.items() if problem.is_correct(f"\\boxed{{{answer}}}"))
            row.sample_accuracy = right / whole.economy.samples
        return row

    async def _gather(self, desc: str, jobs: Sequence[Awaitable[Row]]) -> list[Row]:
        """Runs the jobs (at most `concurrency` requests at a time: `_one` holds the semaphore) with a progress bar."""
        bar = tqdm(total=len(jobs), desc=desc, unit="request")

        async def run(job: Awaitable[Row]) -> Row:
            row = await job
            bar.update()
            return row

        try:
            return list(await asyncio.gather(*(run(job) for job in jobs)))
        finally:
            bar.close()

    def _seed(self, i: int) -> int:
        return self.settings.seed * 100_003 + i

    async def full(self, problems: Problems) -> list[Row]:
        return await self._gather("full thinking", [
            self._one(f"full-{i}", "full", d, p, self.most_thinking, seed=self._seed(i)) for i, (d, p) in enumerate(problems)])

    async def off(self, problems: Problems) -> list[Row]:
        return await self._gather("thinking off", [
            self._one(f"off-{i}", "off", d, p, 0, temperature=0.0) for i, (d, p) in enumerate(problems)])

    async def budget(self, problems: Problems) -> list[Row]:
        budgets = [b for b in self.settings.budgets if 0 < b <= self.most_thinking]
        return await self._gather("budget sweep", [
            self._one(f"budget-{b}-{i}", "budget", d, p, b, seed=self._seed(i))
            for b in budgets for i, (d, p) in enumerate(problems)])

    async def vote(self, problems: Problems) -> list[Row]:
        n = self.settings.votes
        return await self._gather(f"vote of {n}", [
            self._one(f"vote-{i}", "vote", d, p, self.most_thinking, samples=n, consensus=n, seed=self._seed(7919 * i))
            for i, (d, p) in enumerate(problems)])
