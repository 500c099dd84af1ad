"""The uncertainty rule's second arm is chosen on training rows out of fold: the largest hard probability that keeps
every hard row off the chat band, so that as few chat prompts as possible lose the chat tier."""

from __future__ import annotations

import torch

from thinktier.deployments.classifier.difficulty_artifact import HEAD_CLASSES
from thinktier.training.classifier.classifier_training import ANCHORS
from thinktier.training.classifier.hard_risk import CANDIDATES, choose_hard_risk, hard_rows_in_chat

CHAT, HARD = HEAD_CLASSES.index("chat"), HEAD_CLASSES.index("hard")


def rows(*chat_hard: tuple[float, float]) -> torch.Tensor:
    probabilities = torch.zeros(len(chat_hard), len(HEAD_CLASSES))
    for i, (chat, hard) in enumerate(chat_hard):
        probabilities[i, CHAT], probabilities[i, HARD] = chat, hard
    return probabilities


def test_the_largest_candidate_that_keeps_every_hard_row_off_the_chat_band() -> None:
    # a terse hard prompt that looks like chat (P(hard) 0.12), a sure chat prompt (0.02), an unsure one (0.08)
    probabilities = rows((0.88, 0.12), (0.98, 0.02), (0.92, 0.08))
    labels = torch.tensor([HARD, CHAT, CHAT])
    assert hard_rows_in_chat(probabilities, labels, ANCHORS, 0.5, None) == 1
    assert choose_hard_risk(probabilities, labels, ANCHORS, 0.5) == 0.1
    assert hard_rows_in_chat(probabilities, labels, ANCHORS, 0.5, 0.1) == 0


def test_no_arm_where_no_hard_row_needs_one_and_the_smallest_where_none_suffices() -> None:
    labels = torch.tensor([HARD, CHAT])
    assert choose_hard_risk(rows((0.1, 0.9), (0.98, 0.02)), labels, ANCHORS, 0.5) is None
    assert choose_hard_risk(rows((0.99, 0.01), (0.98, 0.02)), labels, ANCHORS, 0.5) == CANDIDATES[-1]
