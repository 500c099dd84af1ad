"""The planner's workload: the load test's own seeded arrivals and prompts (so a plan of a recorded run sends the
same prompts at the same offsets as `thinktier loadtest run` did), optionally ramped by a diurnal swing, each prompt
scored once by the real difficulty classifier, and what each request would generate if no budget stopped it.

Lengths: `budget` (the default) thinks and answers until the budget stops it, as the dummy-weight engines of the GPU
runs do; `recorded:FILE` draws each class's (thinking, answer) tokens from a recorded load test's requests.jsonl.
Prompt tokens are estimated as characters / 4 plus the chat template's ~12 tokens.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from thinktier.deployments.request.decision import DifficultyScore
from thinktier.loadtest.workload import Mix, Prompt, PromptPool, arrival_times

UNBOUNDED = 1 << 30
"""Tokens a request would generate when only its budget stops it."""
TEMPLATE_TOKENS = 12
SCORE_CACHE = Path.home() / ".cache" / "thinktier" / "plan"


@dataclass(frozen=True)
class WorkloadSpec:
    mix: Mix
    rate: float
    shape: float
    duration_s: float
    seed: int
    languages: tuple[str, ...] | None = ("en",)
    diurnal_amplitude: float = 0.0
    """The arrival rate swings between rate x (1 - a) and rate x (1 + a) ..."""
    diurnal_period_s: float = 86_400.0
    """... over this period, starting at the mean and rising."""

    @classmethod
    def from_report(cls, path: Path) -> WorkloadSpec:
        """The workload of a recorded `thinktier loadtest run` (one open-loop rate): its mix, rate, shape, duration and
        seed, with the load test's default languages."""
        settings = json.loads(path.read_text())["settings"]
        rates = settings["rates"]
        if isinstance(rates, str):  # the load test records its --rates text, e.g. "1,2.5"; the planner a list
            rates = [r for r in rates.split(",") if r]
        if settings.get("mode") != "open" or len(rates) != 1:
            raise ValueError(f"{path}: the planner replays one open-loop rate; this run has mode {settings.get('mode')} "
                             f"and rates {rates}")
        return cls(Mix.parse(settings["mix"]), float(rates[0]), float(settings["shape"]), float(settings["duration_s"]),
                   int(settings["seed"]))


@dataclass(frozen=True)
class Arrival:
    index: int
    at_s: float
    prompt: Prompt
    prompt_tokens: int


def warped(times: np.ndarray, amplitude: float, period_s: float) -> np.ndarray:
    """Map arrival times of a constant-rate process onto one whose rate is rate x (1 + a sin(2 pi t / P)): t goes where
    the cumulative intensity t + a P / (2 pi) (1 - cos(2 pi t / P)) reaches the old time."""
    if amplitude == 0 or not len(times):
        return times
    grid = np.linspace(0.0, float(times.max()) * 1.01 + 1.0, 200_001)
    cumulative = grid + amplitude * period_s / (2 * math.pi) * (1 - np.cos(2 * math.pi * grid / period_s))
    return np.interp(times, cumulative, grid)


def arrivals(spec: WorkloadSpec, pool: PromptPool) -> list[Arrival]:
    """The same draws as `thinktier.loadtest.workload.open_loop` with the same seed (then warped when diurnal)."""
    rng = np.random.default_rng(spec.seed)
    times = arrival_times(rng, spec.rate, spec.shape, spec.duration_s)
    prompts = pool.draw(rng, spec.mix, len(times))
    times = warped(times, spec.diurnal_amplitude, spec.diurnal_period_s)
    return [
        Arrival(i, float(t), p, len(p.text) // 4 + TEMPLATE_TOKENS)
        for i, (t, p) in enumerate(zip(times, prompts, strict=True))
        if t < spec.duration_s
    ]


def _text_key(prompt: Prompt) -> str:
    """A prompt's key in the score cache: its text's digest (an id such as reasoner-small-3 names other text under
    another seed)."""
    return hashlib.sha256(prompt.text.encode()).hexdigest()


def classifier_scores(artifact: str, prompts: Sequence[Prompt]) -> dict[str, DifficultyScore]:
    """The real classifier's score of every distinct prompt, by prompt id; cached on disk by classifier version and
    prompt text."""
    from thinktier.deployments.classifier.difficulty import DifficultyModel  # lazily: loads torch and the embedder

    model = DifficultyModel.load(artifact)
    cache_path = SCORE_CACHE / f"scores-by-text-{model.version}.json"
    cache: dict[str, list[float]] = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    todo = list({_text_key(p): p for p in prompts if _text_key(p) not in cache}.values())
    for start in tqdm(range(0, len(todo), 64), desc="classifier scores", unit="batch", disable=not todo):
        batch = todo[start : start + 64]
        for prompt, score in zip(batch, model.score_batch([p.text for p in batch]), strict=True):
            cache[_text_key(prompt)] = [score.score, score.probs["easy"], score.probs["medium"], score.probs["hard"]]
    if todo:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        cache_path.write_text(json.dumps(cache))
    scores = {}
    for p in prompts:
        value, *probs = cache[_text_key(p)]
        scores[p.id] = DifficultyScore(value, dict(zip(("easy", "medium", "hard"), probs, strict=True)), model.version)
    return scores


class Lengths:
    """What a request of a class would generate if no budget stopped it: (thinking, answer) tokens."""

    def __init__(self, recorded: dict[str, list[tuple[int, int]]] | None, seed: int) -> None:
        self.recorded = recorded
        self.rng = np.random.default_rng(seed + 1)

    @classmethod
    def parse(cls, text: str, seed: int) -> Lengths:
        if text == "budget":
            return cls(None, seed)
        kind, _, path = text.partition(":")
        if kind != "recorded" or not path:
            raise ValueError(f"lengths {text!r}: expected 'budget' or 'recorded:REQUESTS.jsonl'")
        by_class: dict[str, list[tuple[int, int]]] = {}
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            if row.get("status") == 200 and row.get("completion_tokens") is not None:
                thinking = row.get("reasoning_tokens") or 0
                by_class.setdefault(row["request_class"], []).append((thinking, row["completion_tokens"] - thinking))
        return cls(by_class, seed)

    def draw(self, request_class: str) -> tuple[int, int]:
        if self.recorded is None:
            return UNBOUNDED, UNBOUNDED
        options = self.recorded.get(request_class)
        if not options:
            raise ValueError(f"the recorded lengths have no successful {request_class!r} request")
        return options[int(self.rng.integers(len(options)))]
