"""The uncertainty rule's second arm: the hard probability from which a prompt is never answered with thinking off.

Chosen out of fold on the training rows only: the largest candidate at which no hard row scores in the chat band (the
largest keeps the most chat prompts on the chat tier). None when no hard row lands there without it; the smallest
candidate when none reaches zero (the fewest hard rows left in chat).
"""

from __future__ import annotations

import torch

from thinktier.deployments.classifier.difficulty import fold_scores
from thinktier.deployments.classifier.difficulty_artifact import HEAD_CLASSES
from thinktier.training.classifier.fast_head import bands

CANDIDATES = (0.3, 0.25, 0.2, 0.15, 0.1, 0.05)
"""Tried from the largest."""


def hard_rows_in_chat(
    probabilities: torch.Tensor,
    labels: torch.Tensor,
    anchors: torch.Tensor,
    chat_confidence: float | None,
    hard_risk: float | None,
) -> int:
    """Hard rows whose score falls in the default policy's chat band (chat tier, thinking off)."""
    in_chat = bands(fold_scores(probabilities, anchors, chat_confidence, hard_risk)) == 0
    return int((in_chat & (labels == HEAD_CLASSES.index("hard"))).sum())


def choose_hard_risk(
    probabilities: torch.Tensor, labels: torch.Tensor, anchors: torch.Tensor, chat_confidence: float | None
) -> float | None:
    """`hard_risk` from out-of-fold probabilities of the training rows and their labels."""
    if hard_rows_in_chat(probabilities, labels, anchors, chat_confidence, None) == 0:
        return None
    for candidate in CANDIDATES:
        if hard_rows_in_chat(probabilities, labels, anchors, chat_confidence, candidate) == 0:
            return candidate
    return CANDIDATES[-1]
