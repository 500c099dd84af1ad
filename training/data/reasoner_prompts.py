"""Prompts of the project's own reasoning model (training/reasoner/tasks.py), whose needed thinking is known (issue 33).

A reasoner problem adds one number to another `count` times; each addition is a step of thinking, so the thinking it
needs is its step count. The label is the class whose budget suffices for that thinking, by the large size's difficulty
(training/reasoner/sizes.py, the size served on GPUs): `SIZES["large"].difficulty.of(count)`, easy up to 2 steps,
medium up to 30, hard beyond. Its budgets (policies/examples/reasoner-large.yaml: low 512, medium 2,048, high 10,240
thinking tokens) grow with its classes' chains (the high budget holds the longest hard trace with its check), so a chain
longer than a class's longest is not sure to fit that class's budget and goes to the class above, as `Difficulty.of`
puts it (a budget cut answers with the value reached so far, wrong on an unfinished chain). The small size's ranges
(hard 22-32 steps) would call 25 steps hard where the large's medium budget is made for it; one classifier serves both,
and the large's rule is the one whose budgets it routes to.

Counts are drawn from the large size's class ranges (easy 1-2, medium 10-30, hard 105-135), the problems the large
size is served and benchmarked on, in its three languages and every template, so the classifier learns what the
thinking of a chain grows with (its count), not which template or language asked. Training rows and the bench's
held-out rows are drawn with different seeds, and a bench prompt that equals a training prompt is dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

from thinktier.policies.schema import DifficultyClass
from thinktier.training.reasoner.sizes import SIZES
from thinktier.training.reasoner.tasks import LANGUAGES, problems

RULE = SIZES["large"].difficulty
TRAINING_SEED = 0
BENCH_SEED = 1


@dataclass(frozen=True)
class ReasonerPrompt:
    """One problem. `id` is `reasoner:<seed>:<language>:<index>`; each problem is its own, with no translation."""

    id: str
    text: str
    label: DifficultyClass
    language: str
    steps: int


def reasoner_prompts(per_class: int, seed: int = TRAINING_SEED) -> list[ReasonerPrompt]:
    """`per_class` problems of each class in each of the reasoner's languages, labelled by the large size's rule."""
    out: list[ReasonerPrompt] = []
    for language in LANGUAGES:
        for i, (_, problem) in enumerate(problems(RULE, per_class, seed, language)):
            label = RULE.of(problem.count)
            out.append(ReasonerPrompt(f"reasoner:{seed}:{language}:{i}", problem.prompt, label, language, problem.count))
    return out


def bench_reasoner_prompts(per_class: int, training_per_class: int) -> list[ReasonerPrompt]:
    """Held-out problems for the bench: drawn with BENCH_SEED, without any prompt the training rows hold."""
    trained = {p.text for p in reasoner_prompts(training_per_class)}
    return [p for p in reasoner_prompts(per_class, BENCH_SEED) if p.text not in trained]
