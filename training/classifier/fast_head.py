"""The classifier's cheap first stage: when its head on the features after the embedding may decide a prompt alone.

The fast head (deployments/classifier/difficulty.py FastHead) is fitted like the whole head, on the same rows, with the
embedding's columns left out. What it may decide is chosen out of fold on the training rows only, apart for the two
directions a decision can take:
- a prompt it puts in a reasoning class (easy, medium, hard): from the lowest top-class probability at which those
  decisions land in the whole head's routing band at least `agreement` of the time;
- a prompt it puts in the chat class (answered with thinking off): from the lowest at which none of them lands in the
  chat band where the whole head keeps it off, so that the cheap stage never takes a prompt's thinking away.
"""

from __future__ import annotations

import torch

from thinktier.deployments.classifier.difficulty import fold_scores
from thinktier.deployments.classifier.difficulty_artifact import HEAD_CLASSES, FastHeadSpec
from thinktier.policies.schema import Thresholds

CONFIDENCES = (0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.925, 0.95, 0.97, 0.98, 0.99, 0.995, 0.999)
"""The candidate confidences, tried from the lowest (the most prompts decided cheaply)."""
CHAT = HEAD_CLASSES.index("chat")


def bands(scores: torch.Tensor) -> torch.Tensor:
    """The routing band of each score under the policy's default thresholds: 0 chat, 1 low, 2 medium, 3 high effort."""
    t = Thresholds()
    return torch.bucketize(scores, torch.tensor([t.reasoning, t.medium, t.high]), right=True)


def _lowest(meets: list[bool]) -> float | None:
    return next((c for c, ok in zip(CONFIDENCES, meets, strict=True) if ok), None)


def choose_confidence(
    whole: torch.Tensor,
    fast: torch.Tensor,
    anchors: torch.Tensor,
    chat_confidence: float | None,
    agreement: float,
    hard_risk: float | None = None,
) -> FastHeadSpec | None:
    """The fast head's two confidences from these out-of-fold probabilities of the same rows (whole head, fast head),
    both scored under the uncertainty rule; None when no candidate meets the rule for both directions."""
    whole_bands = bands(fold_scores(whole, anchors, chat_confidence, hard_risk))
    fast_bands = bands(fold_scores(fast, anchors, chat_confidence, hard_risk))
    top, predicted = fast.max(dim=-1)
    to_chat = predicted == CHAT

    def agreed(decided: torch.Tensor) -> float:
        return float((fast_bands[decided] == whole_bands[decided]).float().mean()) if bool(decided.any()) else 1.0

    reasoning = _lowest([agreed((top >= c) & ~to_chat) >= agreement for c in CONFIDENCES])
    chat = _lowest([not bool(((top >= c) & to_chat & (whole_bands != 0)).any()) for c in CONFIDENCES])
    if reasoning is None or chat is None:
        return None
    decided = (top >= reasoning) & ~to_chat | (top >= chat) & to_chat
    return FastHeadSpec(
        confidence_reasoning=reasoning, confidence_chat=chat, agreement=agreement,
        decided=round(float(decided.float().mean()), 4), agreed=round(agreed(decided), 4),
    )
