"""What the load test sends and when: a seeded mix of prompts by difficulty class, on an open-loop
Gamma arrival process or in closed-loop batches.

Prompts come from the packaged problem sets (no answers to check) or from the reasoner's task family
(`PromptPool.reasoner`), whose every prompt carries what checks its answer: a chained addition its exact result, a
chat turn the reply the model is taught, right when the visible answer equals it after stripping whitespace.

Gamma inter-arrival times with shape k and rate r have mean 1/r and coefficient of variation 1/sqrt(k):
k = 1 is a Poisson process, k < 1 is burstier (requests come in clumps with long gaps), as reasoning
traffic tends to be. Everything is drawn from one `numpy.random.Generator` seeded by the user, so the
same arguments give the same requests at the same offsets.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, get_args

import numpy as np

from thinktier.deployments.classifier.difficulty_artifact import DEFAULT_ARTIFACT, load_manifest
from thinktier.training.data.chat_prompts import chat_prompts
from thinktier.training.data.problems import Problem, load_problems
from thinktier.training.reasoner import tasks
from thinktier.training.reasoner.sizes import SIZES, SizeName

RequestClass = Literal["easy", "medium", "hard", "chat"]
REQUEST_CLASSES: tuple[RequestClass, ...] = get_args(RequestClass)
REASONER_PROMPTS_PER_CLASS = 500
"""Distinct prompts per class of a reasoner pool: requests draw from them, so a problem rarely repeats."""


@dataclass(frozen=True)
class Mix:
    """Share of requests per class; the shares sum to 1."""

    shares: dict[RequestClass, float]

    @classmethod
    def parse(cls, text: str) -> Mix:
        """Parse 'easy=0.5,medium=0.3,hard=0.1,chat=0.1'; weights are normalised, missing classes get 0."""
        weights: dict[RequestClass, float] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition("=")
            name = name.strip()
            if not sep or name not in REQUEST_CLASSES:
                raise ValueError(f"mix entry {part!r} must look like CLASS=WEIGHT with CLASS one of {list(REQUEST_CLASSES)}")
            try:
                weight = float(value)
            except ValueError:
                raise ValueError(f"mix entry {part!r}: weight {value!r} is not a number") from None
            if weight < 0 or not math.isfinite(weight):
                raise ValueError(f"mix entry {part!r}: weight must be a finite number >= 0")
            weights[name] = weight
        total = sum(weights.values())
        if total <= 0:
            raise ValueError(f"mix {text!r} gives no class a positive weight, e.g. easy=0.5,medium=0.3,hard=0.1,chat=0.1")
        return cls({c: weights.get(c, 0.0) / total for c in REQUEST_CLASSES})

    def __str__(self) -> str:
        return ",".join(f"{c}={s:g}" for c, s in self.shares.items() if s > 0)


class AnswerCheck(Protocol):
    """What tells a right visible answer from a wrong one (a task family's problem, or an exact reply)."""

    def is_correct(self, text: str | None) -> bool: ...


@dataclass(frozen=True)
class ExactReply:
    """A chat turn's taught reply: right when the visible answer equals it after stripping whitespace at both ends."""

    reply: str

    def is_correct(self, text: str | None) -> bool:
        return (text or "").strip() == self.reply.strip()


@dataclass(frozen=True)
class Prompt:
    """One prompt the load test can send, with the class it is judged by."""

    id: str
    text: str
    request_class: RequestClass
    source: str
    answer: AnswerCheck | None = None
    """What checks the visible answer; None when the prompt has no checkable answer (the packaged problem sets)."""


@dataclass(frozen=True)
class WorkItem:
    """One request of a workload. `send_at_s` is the offset from the start of the run (open loop);
    `batch` is the closed-loop batch it belongs to."""

    index: int
    prompt: Prompt
    send_at_s: float = 0.0
    batch: int | None = None


class PromptPool:
    """Prompts grouped by class: the problem sets by their difficulty, plus chat prompts."""

    def __init__(self, problems: Sequence[Problem], chat_prompts: Sequence[str]) -> None:
        self.by_class: dict[RequestClass, list[Prompt]] = {c: [] for c in REQUEST_CLASSES}
        for problem in problems:
            self.by_class[problem.difficulty].append(Prompt(problem.id, problem.text, problem.difficulty, problem.source))
        for i, text in enumerate(chat_prompts):
            self.by_class["chat"].append(Prompt(f"chat-{i}", text, "chat", "chat"))

    @classmethod
    def builtin(cls, languages: Sequence[str] | None = None, max_chars: int | None = None,
                only_ids: Collection[str] | None = None) -> PromptPool:
        """The packaged problem sets (in `languages`, ISO 639-1; all when None) and chat prompts, without those
        longer than `max_chars` (servers refuse prompts past their token limit), and only those whose problem or
        chat-prompt id is in `only_ids` where that is given (`classifier_held_out`)."""

        def kept(prompt_id: str, text: str) -> bool:
            return (max_chars is None or len(text) <= max_chars) and (only_ids is None or prompt_id in only_ids)

        problems = [p for p in load_problems(languages) if kept(p.id, p.text)]
        chat = [c for c in chat_prompts(["en"]) if kept(c.id, c.text)]  # English, as the load tests were calibrated on
        return cls.of_prompts([*(Prompt(p.id, p.text, p.difficulty, p.source) for p in problems),
                               *(Prompt(c.id, c.text, "chat", "chat") for c in chat)])

    @classmethod
    def of_prompts(cls, prompts: Iterable[Prompt]) -> PromptPool:
        """A pool of these prompts, each under its request class."""
        pool = cls([], [])
        for prompt in prompts:
            pool.by_class[prompt.request_class].append(prompt)
        return pool

    @classmethod
    def reasoner(cls, size: SizeName, seed: int, languages: Sequence[str] | None = None,
                 per_class: int = REASONER_PROMPTS_PER_CLASS) -> PromptPool:
        """The reasoner's task family at `size`'s difficulty, seeded: `per_class` chained additions of each class (the
        step counts of `SIZES[size].difficulty`), each checked by its exact answer, and as many chat turns, each checked
        by its taught reply. `languages`: one of the family's languages, or None for all three mixed."""
        language = _reasoner_language(languages)
        source = f"reasoner-{size}"
        drawn = tasks.problems(SIZES[size].difficulty, per_class, seed, language)
        rng = random.Random(seed)
        turns = [tasks.sample_chat(rng, language) for _ in range(per_class)]
        return cls.of_prompts([
            *(Prompt(f"{source}-{i}", p.prompt, c, source, p) for i, (c, p) in enumerate(drawn)),
            *(Prompt(f"{source}-chat-{i}", t.prompt, "chat", source, ExactReply(t.reply)) for i, t in enumerate(turns)),
        ])

    def check(self, mix: Mix) -> None:
        empty = [c for c, share in mix.shares.items() if share > 0 and not self.by_class[c]]
        if empty:
            raise ValueError(f"the mix asks for {empty} but the prompt pool has no prompts of that class; drop them from --mix")

    def draw(self, rng: np.random.Generator, mix: Mix, count: int) -> list[Prompt]:
        """`count` prompts: the class by the mix, then a prompt of that class uniformly."""
        self.check(mix)
        classes = list(mix.shares)
        picks = rng.choice(len(classes), size=count, p=[mix.shares[c] for c in classes])
        prompts = []
        for pick in picks:
            group = self.by_class[classes[pick]]
            prompts.append(group[int(rng.integers(len(group)))])
        return prompts


def classifier_held_out(artifact: str = DEFAULT_ARTIFACT) -> frozenset[str]:
    """Ids of the problems (with all their translations) and chat prompts `artifact`'s classifier was not trained on,
    as its manifest records them: a load drawn from them does not score prompts the classifier has seen."""
    held_out = load_manifest(artifact).provenance.held_out_problems
    return frozenset(pid for ids in held_out.values() for pid in ids)


def _reasoner_language(languages: Sequence[str] | None) -> tasks.Language | None:
    """The one language of `languages` the reasoner's prompts are written in; None (all three mixed) for None."""
    if languages is None:
        return None
    chosen = [code for code in tasks.LANGUAGES if list(languages) == [code]]
    if not chosen:
        raise ValueError(f"the reasoner's prompts are in {list(tasks.LANGUAGES)}: give one of them or all, not {list(languages)}")
    return chosen[0]


def gamma_interarrivals(rng: np.random.Generator, rate: float, shape: float, count: int) -> np.ndarray:
    """`count` inter-arrival gaps in seconds: Gamma(shape, scale=1/(rate*shape)), mean 1/rate, CV 1/sqrt(shape)."""
    if rate <= 0 or shape <= 0:
        raise ValueError(f"rate ({rate}) and shape ({shape}) must both be > 0")
    return rng.gamma(shape, 1.0 / (rate * shape), size=count)


def arrival_times(rng: np.random.Generator, rate: float, shape: float, duration_s: float) -> np.ndarray:
    """Arrival offsets in [0, duration_s) of a Gamma renewal process; the first request leaves at 0."""
    expected = rate * duration_s
    draws = max(16, int(expected + 8 * math.sqrt(expected / shape) + 16))
    times = np.concatenate(([0.0], np.cumsum(gamma_interarrivals(rng, rate, shape, draws))))
    while times[-1] < duration_s:  # never hit in practice, but the process must cover the whole duration
        times = np.concatenate((times, times[-1] + np.cumsum(gamma_interarrivals(rng, rate, shape, draws))))
    return times[times < duration_s]


def open_loop(pool: PromptPool, mix: Mix, rate: float, shape: float, duration_s: float, seed: int) -> list[WorkItem]:
    """Requests sent at Gamma arrival times whatever the server does: queues build when it falls behind."""
    rng = np.random.default_rng(seed)
    times = arrival_times(rng, rate, shape, duration_s)
    prompts = pool.draw(rng, mix, len(times))
    return [WorkItem(i, p, float(t)) for i, (t, p) in enumerate(zip(times, prompts, strict=True))]


def closed_loop(pool: PromptPool, mix: Mix, batch_size: int, batches: int, seed: int) -> list[list[WorkItem]]:
    """Batches sent all at once; the next batch leaves when the slowest request of the last one is done."""
    if batch_size < 1 or batches < 1:
        raise ValueError(f"batch size ({batch_size}) and number of batches ({batches}) must both be >= 1")
    rng = np.random.default_rng(seed)
    prompts = pool.draw(rng, mix, batch_size * batches)
    return [
        [WorkItem(b * batch_size + i, prompts[b * batch_size + i], batch=b) for i in range(batch_size)] for b in range(batches)
    ]
