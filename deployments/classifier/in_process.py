"""The difficulty model inside the Ingress's own process (policy `routing.classifier.placement: ingress`).

Scoring a prompt takes a few milliseconds of one core; reaching the classifier deployment adds a Serve call (a
handle, an actor hop, `@serve.batch`'s wait) to that before every first token. Here each Ingress replica loads its
own copy of the model and scores on one worker thread of its own: no hop and no batching wait, at the cost of the
model's memory in every Ingress replica. The thread keeps scoring off the event loop, so the replica goes on
streaming other requests meanwhile.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

from thinktier.deployments.classifier.classifier import score_isolated
from thinktier.deployments.request.decision import DifficultyScore

if TYPE_CHECKING:
    from thinktier.deployments.classifier.difficulty import DifficultyModel


def _load(artifact: str) -> DifficultyModel:
    # Imported here: torch and transformers load on the worker thread, not while the Ingress starts.
    from thinktier.deployments.classifier.difficulty import DifficultyModel

    model = DifficultyModel.load(artifact)
    model.warm_up()  # the encoder builds on its first call (about a second): not on a user's request
    return model


class InProcessScorer:
    """Scores prompts with a model loaded in this process; the load starts at construction, on the worker thread, and
    a prompt that arrives before it finishes waits for it (within the classifier's timeout_s, like any score)."""

    def __init__(self, artifact: str) -> None:
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="difficulty")
        self._model: Future[DifficultyModel] = self._thread.submit(_load, artifact)

    def _score(self, prompt: str) -> DifficultyScore | None:
        return score_isolated(self._model.result(), [prompt])[0]

    async def score(self, prompt: str) -> DifficultyScore | None:
        """The prompt's score; None when it cannot be scored."""
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._score, prompt)
