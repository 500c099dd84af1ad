"""The classifier's cheap first stage (difficulty-v8): which prompts its fast head may decide alone, and that the rest
are scored exactly as the whole head scores them."""

from __future__ import annotations

import pytest
import torch

from thinktier.deployments.classifier.difficulty import DifficultyModel
from thinktier.training.classifier.classifier_training import ANCHORS
from thinktier.training.classifier.fast_head import CONFIDENCES, bands, choose_confidence

SURE = torch.tensor([0.96, 0.02, 0.01, 0.01])  # chat, surely
LEANING = torch.tensor([0.1, 0.75, 0.1, 0.05])  # easy, fairly
EASY = torch.tensor([0.0, 1.0, 0.0, 0.0])
HARD = torch.tensor([0.0, 0.0, 0.0, 1.0])


def test_bands_follow_the_default_thresholds() -> None:
    assert bands(torch.tensor([0.0, 0.29, 0.3, 0.59, 0.6, 0.79, 0.8, 1.0])).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_each_direction_gets_the_lowest_confidence_that_meets_its_rule() -> None:
    fast = torch.stack([SURE, LEANING, LEANING])
    whole = torch.stack([SURE, EASY, HARD])  # the whole head puts the third row in the high band, the fast one low
    chosen = choose_confidence(whole, fast, ANCHORS, 0.5, agreement=0.9)
    assert chosen is not None and chosen.confidence_chat == CONFIDENCES[0]  # the sure chat row agrees at any level
    assert chosen.confidence_reasoning == min(c for c in CONFIDENCES if c > 0.75)  # the leaning rows disagree once
    assert (chosen.decided, chosen.agreed) == (pytest.approx(1 / 3, abs=1e-4), 1.0)
    loose = choose_confidence(whole, fast, ANCHORS, 0.5, agreement=0.5)
    assert loose is not None and loose.confidence_reasoning == CONFIDENCES[0]  # 1 of 2 reasoning decisions agree


def test_no_chat_decision_takes_the_thinking_from_a_prompt_the_whole_head_keeps_off_chat() -> None:
    fast = torch.stack([SURE, SURE, torch.tensor([0.995, 0.005, 0.0, 0.0])])
    whole = torch.stack([SURE, SURE, HARD])  # the third row would lose its thinking
    chosen = choose_confidence(whole, fast, ANCHORS, 0.5, agreement=0.99)
    assert chosen is not None and chosen.confidence_chat == 0.999  # above the third row's 0.995
    assert choose_confidence(torch.stack([HARD]), torch.stack([torch.tensor([1.0, 0, 0, 0])]), ANCHORS, 0.5, 0.99) is None


@pytest.fixture(scope="module")
def staged() -> tuple[DifficultyModel, DifficultyModel]:
    return DifficultyModel.load("builtin:difficulty-v8"), DifficultyModel.load("builtin:difficulty-v7")


PROMPTS = (
    "hi there!",
    "what is the sum of 17 and 25",
    "Prove that pi is irrational.",
    "Let $a,b,c>0$ with $abc=1$. Prove that $\\sum \\frac{1}{a^3(b+c)} \\ge \\frac{3}{2}$.",
    "Bonjour, tu peux me conseiller un bon livre pour les vacances ?",
    "My Python function returns None instead of the list; here it is: def f(xs): xs.sort()",
)


def test_prompts_the_fast_head_is_unsure_of_score_as_the_whole_head_does(staged) -> None:
    v8, v7 = staged
    probabilities, fast = v8.probabilities_and_stage(list(PROMPTS))
    whole = v7.head_probabilities(list(PROMPTS))
    assert torch.equal(v8.head.weight, v7.head.weight)  # the same whole head, retrained bit for bit
    for row, decided in enumerate(fast):
        if not decided:
            assert torch.allclose(probabilities[row], whole[row])
    gate = v8.manifest.fast_head
    assert gate is not None and all(
        float(probabilities[row].max()) >= min(gate.confidence_chat, gate.confidence_reasoning)
        for row, decided in enumerate(fast) if decided
    )


def test_a_prompt_the_fast_head_decides_is_never_embedded(staged, monkeypatch: pytest.MonkeyPatch) -> None:
    v8, _ = staged
    embedded: list[str] = []
    embedding = v8.embedder.embedding
    monkeypatch.setattr(v8.embedder, "embedding", lambda text: embedded.append(text) or embedding(text))
    _, fast = v8.probabilities_and_stage(list(PROMPTS))
    assert any(fast), "the fast head decided none of the prompts"
    assert embedded == [p for p, decided in zip(PROMPTS, fast, strict=True) if not decided]


def test_each_score_says_which_head_gave_it(staged) -> None:
    v8, v7 = staged
    _, fast = v8.probabilities_and_stage(list(PROMPTS))
    assert [s.stage for s in v8.score_batch(list(PROMPTS))] == ["fast" if f else "whole" for f in fast]
    assert {s.stage for s in v7.score_batch(list(PROMPTS))} == {"whole"}  # no fast head: every prompt embedded
