"""The economy bench's prompt sources: each prompt is its chat messages, its difficulty class and a correctness check.

- `arithmetic`: generated easy one-step problems (class easy) after a shared few-shot system prompt, for the demo
  model (SmolLM2 answers more often in \\boxed{} after it; production prompts have a shared block too).
- `reasoner`: seeded chained-addition problems of the reasoner's task family (training/reasoner/tasks.py), as many
  per class (easy, medium, hard) at the small reasoner's difficulty; the problem alone as the user message, as the
  reasoner was trained, and its own exact check.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from thinktier.deployments.tier.answers import extract_answer, same_answer
from thinktier.policies.schema import DifficultyClass
from thinktier.training.reasoner.sizes import SIZES
from thinktier.training.reasoner.tasks import problems

Task = Literal["arithmetic", "reasoner"]
TASKS: tuple[Task, ...] = ("arithmetic", "reasoner")
CLASSES: tuple[DifficultyClass, ...] = ("easy", "medium", "hard")

FEW_SHOT = "\n\n".join(
    ["You are a careful math tutor. Think step by step, then give the final answer in \\boxed{}."]
    + [f"Example {i}\nQuestion: {q}\nThinking: {t}\nAnswer: \\boxed{{{a}}}" for i, (q, t, a) in enumerate((
        ('What is 14 + 5?', '14 plus 5 is 19.', '19'),
        ('What is 9 * 6?', '9 times 6 is 54.', '54'),
        ('Sara has 12 pens and gives away 4. How many pens does she have left?', '12 minus 4 is 8.', '8'),
        ('What is 30 - 17?', '30 minus 17 is 13.', '13'),
        ('What is 7 * 8?', '7 times 8 is 56.', '56'),
        ('What is 45 + 38?', '45 plus 38: 45 plus 30 is 75, plus 8 is 83.', '83'),
        ('A box holds 6 eggs. How many eggs are in 4 boxes?', '4 boxes of 6 eggs is 4 times 6, which is 24.', '24'),
        ('What is 100 - 64?', '100 minus 64 is 36.', '36'),
        ('Mia reads 15 pages on Monday and 22 pages on Tuesday. How many pages did she read?', '15 plus 22 is 37.', '37'),
        ('What is 12 * 11?', '12 times 11 is 132.', '132'),
    ), start=1)]
)
"""A shared few-shot block, as production prompts have one (and SmolLM2 answers more often in \\boxed{} after it)."""


@dataclass(frozen=True)
class BenchPrompt:
    messages: tuple[dict[str, str], ...]
    difficulty: DifficultyClass
    check: Callable[[str], bool]
    """Whether a visible answer text gives this prompt's answer."""


def _arithmetic(question: str, truth: int) -> BenchPrompt:
    def check(text: str) -> bool:
        answer = extract_answer(text)
        return answer is not None and same_answer(answer, str(truth))

    return BenchPrompt(({"role": "system", "content": FEW_SHOT}, {"role": "user", "content": question}), "easy", check)


def arithmetic_prompts(count: int, seed: int) -> list[BenchPrompt]:
    """`count` easy one-step problems (sums, differences, products, a word problem), the same for a seed."""
    rng = random.Random(seed)
    prompts = []
    for i in range(count):
        a, b = rng.randint(2, 60), rng.randint(2, 40)
        kind = i % 4
        if kind == 0:
            prompts.append(_arithmetic(f"What is {a} + {b}?", a + b))
        elif kind == 1:
            prompts.append(_arithmetic(f"What is {a + b} - {b}?", a))
        elif kind == 2:
            x, y = rng.randint(2, 12), rng.randint(2, 12)
            prompts.append(_arithmetic(f"What is {x} * {y}?", x * y))
        else:
            prompts.append(_arithmetic(f"Ben has {a} marbles and finds {b} more. How many marbles does he have?", a + b))
    return prompts


def reasoner_prompts(count: int, seed: int) -> list[BenchPrompt]:
    """`count` // 3 (at least one) seeded problems of each class at the small reasoner's difficulty."""
    drawn = problems(SIZES["small"].difficulty, max(1, count // len(CLASSES)), seed)
    return [BenchPrompt(({"role": "user", "content": problem.prompt},), difficulty, problem.is_correct)
            for difficulty, problem in drawn]


def bench_prompts(task: Task, count: int, seed: int) -> list[BenchPrompt]:
    return arithmetic_prompts(count, seed) if task == "arithmetic" else reasoner_prompts(count, seed)


def describe(task: Task, prompts: list[BenchPrompt]) -> str:
    """The prompt set in words, for the report."""
    if task == "arithmetic":
        return f"{len(prompts)} easy arithmetic prompts with a few-shot system prompt"
    per_class = {c: sum(p.difficulty == c for p in prompts) for c in CLASSES}
    counts = ", ".join(f"{n} {c}" for c, n in per_class.items())
    return f"{len(prompts)} chained-addition problems of the reasoner's task family ({counts}), no system prompt"
