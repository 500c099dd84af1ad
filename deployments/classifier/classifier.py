"""Ray Serve deployment of the difficulty classifier: one DifficultyModel per replica, requests scored in batches."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from ray import serve

from thinktier.deployments.request.decision import DifficultyScore
from thinktier.deployments.serve_options import ServeOptions, light_options
from thinktier.policies.schema import Classifier

if TYPE_CHECKING:
    from thinktier.deployments.classifier.difficulty import DifficultyModel

logger = logging.getLogger("ray.serve")
CLASSIFIER = "DifficultyClassifier"
"""The deployment's name."""


class BatchScorer(Protocol):
    def score_batch(self, prompts: list[str]) -> list[DifficultyScore]: ...


def score_isolated(model: BatchScorer, prompts: Sequence[str]) -> list[DifficultyScore | None]:
    """Scores for a batch in which one bad prompt must not fail the others: when the batch fails, each prompt is scored
    alone, and one that still fails gets no score (the router then routes it without one)."""
    try:
        return list(model.score_batch(list(prompts)))
    except Exception:  # any failure, of any prompt
        logger.exception("scoring a batch of %d prompts failed; scoring them one by one", len(prompts))
    scores: list[DifficultyScore | None] = []
    for prompt in prompts:
        try:
            scores.append(model.score_batch([prompt])[0])
        except Exception:  # this prompt alone
            logger.exception("a prompt of %d characters could not be scored; it is routed without a score", len(prompt))
            scores.append(None)
    return scores


class DifficultyClassifier:
    """Scores prompts; concurrent `score` calls are gathered by `@serve.batch` into one forward pass."""

    @classmethod
    def deployment_options(cls) -> ServeOptions:
        """One light replica: a batch of prompts takes milliseconds of one core."""
        return light_options(CLASSIFIER, max_ongoing_requests=256)

    async def __init__(self, config: Classifier) -> None:  # type: ignore[misc]  # Serve awaits an async constructor
        # Imported here, not with the module: it brings torch and transformers, which the cluster layer, reading this
        # class's deployment options, does without.
        from thinktier.deployments.classifier.difficulty import DifficultyModel

        self.model: DifficultyModel = await asyncio.to_thread(DifficultyModel.load, config.artifact)
        # Ray's types for @serve.batch leave out the setters it adds to the batched method.
        self._score_batch.set_max_batch_size(config.max_batch_size)  # type: ignore[attr-defined]
        self._score_batch.set_batch_wait_timeout_s(config.batch_wait_timeout_s)  # type: ignore[attr-defined]

    async def score(self, prompt: str) -> DifficultyScore | None:
        """The prompt's score; None when it cannot be scored."""
        return await self._score_batch(prompt)

    @serve.batch
    async def _score_batch(self, prompts: list[str]) -> list[DifficultyScore | None]:
        # In a worker thread: torch releases the GIL, so the replica keeps queueing the next batch meanwhile.
        return await asyncio.to_thread(score_isolated, self.model, prompts)

    async def embed(self, texts: list[str]) -> list[list[float]]:
        """Sentence embeddings of `texts` (tier replicas compare self-consistency samples' free-text answers by them)."""
        return await asyncio.to_thread(self.model.embed, texts)

    def model_version(self) -> str:
        return self.model.version
