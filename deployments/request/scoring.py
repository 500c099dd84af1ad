"""The Ingress's call to the difficulty classifier: a score, or routing without one, never a failed request."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from thinktier.deployments.request.decision import DifficultyScore
from thinktier.deployments.request.metrics import ServiceMetrics
from thinktier.deployments.request.scripts_of_text import script_of
from thinktier.policies.schema import Classifier

if TYPE_CHECKING:
    from ray.serve.handle import DeploymentHandle

    from thinktier.deployments.classifier.classifier import DifficultyClassifier

logger = logging.getLogger("ray.serve")
Scorer = Callable[[str], Awaitable[DifficultyScore | None]]
"""A prompt's score, from wherever the classifier runs."""


def scorer(config: Classifier, deployment: DeploymentHandle[DifficultyClassifier] | None) -> Scorer | None:
    """Where the Ingress's scores come from: the model in its own process (`placement: ingress`) or the classifier
    deployment; None when the classifier is off."""
    if not config.enabled:
        return None
    if config.placement == "ingress":
        # Imported here: a replica that scores through the deployment never loads the model.
        from thinktier.deployments.classifier.in_process import InProcessScorer

        return InProcessScorer(config.artifact).score
    return None if deployment is None else deployment.score.remote


async def difficulty_of(score: Scorer, prompt: str, timeout_s: float, metrics: ServiceMetrics) -> DifficultyScore | None:
    """The prompt's difficulty, or None when the classifier passes its timeout or fails (a dead replica, an error in
    scoring): the request is then routed on itself alone, and `classifier_timeouts` or `classifier_failures` counts
    it. The classifier only refines a decision, so its failure must not fail the request."""
    started = time.monotonic()
    try:
        difficulty: DifficultyScore | None = await asyncio.wait_for(score(prompt), timeout_s)
    except TimeoutError:
        metrics.classifier_timeouts.inc()
        return None
    except Exception as exc:  # any failure of the classifier's call: route without a score
        metrics.classifier_failures.inc()
        logger.warning("difficulty classifier failed (%s: %s); routing without a score", type(exc).__name__, exc)
        return None
    metrics.classifier_latency.observe(time.monotonic() - started)
    if difficulty is not None:
        metrics.classifier_decisions.labels(difficulty.label, script_of(prompt), difficulty.stage).inc()
    return difficulty
