"""Ray Serve deployment of the difficulty classifier: one DifficultyModel per replica, requests scored in batches."""

from __future__ import annotations

import asyncio

from ray import serve

from deployments.decision import DifficultyScore
from deployments.difficulty import DifficultyModel
from policies.schema import Classifier


@serve.deployment
class DifficultyClassifier:
    """Scores prompts; concurrent `score` calls are gathered by `@serve.batch` into one forward pass."""

    async def __init__(self, config: Classifier) -> None:
        self.model = await asyncio.to_thread(DifficultyModel.load, config.artifact)
        self._score_batch.set_max_batch_size(config.max_batch_size)
        self._score_batch.set_batch_wait_timeout_s(config.batch_wait_timeout_s)

    async def score(self, prompt: str) -> DifficultyScore:
        return await self._score_batch(prompt)

    @serve.batch
    async def _score_batch(self, prompts: list[str]) -> list[DifficultyScore]:
        # In a worker thread: torch releases the GIL, so the replica keeps queueing the next batch meanwhile.
        return await asyncio.to_thread(self.model.score_batch, prompts)

    def model_version(self) -> str:
        return self.model.version
