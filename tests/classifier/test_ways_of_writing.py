"""Issue 33: the default classifier follows the reasoning a prompt needs, not its length or its source's style; the
external prompts it is judged on stay apart from everything it is trained on."""

from __future__ import annotations

import pytest
import torch

from thinktier.deployments.classifier.difficulty import DifficultyModel, fold_scores
from thinktier.deployments.classifier.difficulty_artifact import HEAD_CLASSES
from thinktier.deployments.request.decision import Decision, RoutingRequest
from thinktier.deployments.request.routing import decide
from thinktier.policies.loader import load_policy
from thinktier.training.classifier.classifier_config import TrainingConfig
from thinktier.training.classifier.classifier_training import ANCHORS, build_examples, examples_of, split_by_problem
from thinktier.training.data.chat_prompts import chat_prompts
from thinktier.training.data.external_problems import load_external_problems
from thinktier.training.data.external_prompts import external_prompts
from thinktier.training.data.math_levels import math_level_problems
from thinktier.training.data.problem_overlap import CopyFinder
from thinktier.training.data.problems import LANGUAGES
from thinktier.training.data.written_prompts import written_prompts

POLICY = load_policy()  # the embedded default: a chat tier below the reasoning threshold
CAT = (
    "I'm thinking of adopting a cat but I live in a small flat, and I'm out at work most of the day. My friend says "
    "cats don't mind being alone, but I'm not so sure. What do you think, would a cat be happy with me?"
)


@pytest.fixture(scope="module")
def model() -> DifficultyModel:
    return DifficultyModel.load()


def route(model: DifficultyModel, prompt: str) -> Decision:
    return decide(POLICY, RoutingRequest(prompt=prompt), model.score_batch([prompt])[0], {})


@pytest.mark.parametrize(
    "prompt",
    [
        "Prove that pi is irrational.",
        "Prove the Erdős–Ginzburg–Ziv theorem.",  # noqa: RUF001
        "أثبت مبرهنة ويلسون.",  # Wilson's theorem, Arabic: difficulty-v8 sent it to the chat tier
        "पिक का प्रमेय सिद्ध कीजिए।",  # Pick's theorem, Hindi: likewise
    ],
)
def test_a_terse_request_to_prove_a_named_theorem_is_thought_about(model: DifficultyModel, prompt: str) -> None:
    decision = route(model, prompt)
    assert decision.tier == "reasoning" and decision.thinking_tokens > 0, decision


@pytest.mark.parametrize(
    "prompt",
    [
        CAT,
        "Mi vecina me regaló un montón de tomates de su huerto y no sé qué hacer con tantos. No me gusta mucho la salsa "
        "de tomate. ¿Se te ocurre alguna receta fácil y fresca para la cena de esta noche?",
    ],
)
def test_long_everyday_chat_goes_to_the_chat_tier(model: DifficultyModel, prompt: str) -> None:
    decision = route(model, prompt)
    assert (decision.tier, decision.thinking_tokens) == ("chat", 0), decision


def test_a_bug_fix_request_is_thought_about(model: DifficultyModel) -> None:
    prompt = "Why does this Python print None instead of the sorted list?\nnums = [3, 1, 2]\nnums = nums.sort()\nprint(nums)"
    assert route(model, prompt).tier == "reasoning"


def test_an_unsure_chat_probability_keeps_a_prompt_off_the_chat_band() -> None:
    """The uncertainty rule: P(chat) 0.75 and P(hard) 0.25 is an expected score of 0.25, in the chat band; under a
    confidence of 0.8 it scores the easy anchor instead. A sure chat prompt keeps its score, and without a rule nothing
    moves."""
    chat, easy, hard = (HEAD_CLASSES.index(c) for c in ("chat", "easy", "hard"))
    unsure, sure = torch.zeros(2, len(HEAD_CLASSES)), torch.zeros(2, len(HEAD_CLASSES))
    unsure[0, chat], unsure[0, hard], unsure[1, chat], unsure[1, hard] = 0.75, 0.25, 0.95, 0.05
    ruled = fold_scores(unsure, ANCHORS, 0.8)
    assert float(ruled[0]) == pytest.approx(float(ANCHORS[easy]))
    assert float(ruled[1]) == pytest.approx(0.05)
    assert fold_scores(unsure, ANCHORS, None).tolist() == pytest.approx([0.25, 0.05])
    sure[:, hard] = 1.0
    assert fold_scores(sure, ANCHORS, 0.8).tolist() == pytest.approx([1.0, 1.0])


def test_a_real_chance_of_being_hard_keeps_a_prompt_off_the_chat_band_however_sure_chat_is() -> None:
    """The rule's second arm: P(chat) 0.9 and P(hard) 0.1 passes the chat confidence of 0.5 and scores 0.1, in the chat
    band; with a hard risk of 0.1 it scores the easy anchor. P(hard) 0.05 stays chat."""
    chat, easy, hard = (HEAD_CLASSES.index(c) for c in ("chat", "easy", "hard"))
    rows = torch.zeros(2, len(HEAD_CLASSES))
    rows[0, chat], rows[0, hard], rows[1, chat], rows[1, hard] = 0.9, 0.1, 0.95, 0.05
    assert fold_scores(rows, ANCHORS, 0.5).tolist() == pytest.approx([0.1, 0.05])
    assert fold_scores(rows, ANCHORS, 0.5, hard_risk=0.1).tolist() == pytest.approx([float(ANCHORS[easy]), 0.05])


def test_the_external_prompts_are_nowhere_in_training() -> None:
    prompts = external_prompts()
    texts = [p.text for p in prompts]
    assert len(set(texts)) == len(texts) and len({p.id for p in prompts}) == len(prompts)
    assert {"de", "ru", "hi"} <= {p.language for p in prompts} and not {"de", "ru", "hi"} & set(LANGUAGES)
    assert {p.label for p in prompts} == {"chat", "easy", "medium", "hard"}
    assert {p.kind for p in prompts if p.label == "chat"} == {"long-chat", "short-chat"}
    trained = [e.text for e in examples_of(TrainingConfig())]
    copies = CopyFinder(trained)
    assert not set(texts) & set(trained)
    assert [t for t in texts if copies.is_copy(t)] == []


def test_the_added_sources_never_move_the_problems_split() -> None:
    """v6 holds out every row v5 held out (and adds its own), so the bench compares them on rows neither trained on."""
    languages = list(LANGUAGES)
    _, before = split_by_problem(build_examples(languages), 0.2, 0)
    _, after = split_by_problem(build_examples(languages, written=True, math_per_level=300), 0.2, 0)
    held_before, held_after = {e.problem_id for e in before}, {e.problem_id for e in after}
    assert held_before < held_after
    assert {pid.split(":")[0] for pid in held_after - held_before} == {"written", "MATH-train"}


def test_written_prompts_cover_every_language_and_long_chat_is_long() -> None:
    prompts = written_prompts(list(LANGUAGES))
    for language in LANGUAGES:
        labels = {p.label for p in prompts if p.language == language}
        assert {"chat", "medium", "hard"} <= labels, language
    longest_one_liner = max(len(c.text) for c in chat_prompts(["en"]))
    assert min(len(p.text) for p in prompts if p.label == "chat" and p.language == "en") > longest_one_liner


def test_math_levels_grade_within_the_source_and_copy_no_evaluated_problem() -> None:
    rows = math_level_problems(40)
    assert [label for _, _, label in rows] == ["easy"] * 80 + ["medium"] * 80 + ["hard"] * 40
    evaluated = CopyFinder(p.text for p in load_external_problems())
    assert [pid for pid, text, _ in rows if evaluated.is_copy(text)] == []
