"""`routing.classifier.placement: ingress`: the Ingress scores prompts with its own copy of the model, with the same
scores as the classifier deployment's and the same fallback when scoring fails."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import generate_latest

from thinktier.deployments.classifier.difficulty import DifficultyModel
from thinktier.deployments.request.metrics import ServiceMetrics
from thinktier.deployments.request.scoring import difficulty_of, scorer
from thinktier.policies.schema import Classifier

PROMPTS = ["Prove that pi is irrational.", "hi there, how are you today?"]


def counted(metrics: ServiceMetrics, sample: str) -> float:
    line = next(ln for ln in generate_latest(metrics.registry).decode().splitlines() if ln.startswith(sample))
    return float(line.split()[-1])


def test_the_ingress_scores_prompts_as_the_classifier_deployment_does() -> None:
    score = scorer(Classifier(placement="ingress"), None)
    assert score is not None
    metrics = ServiceMetrics(dict, dict)

    async def both() -> list[float | None]:
        scored = [await difficulty_of(score, prompt, 60.0, metrics) for prompt in PROMPTS]
        return [s.score if s else None for s in scored]

    expected = [s.score for s in DifficultyModel.load().score_batch(PROMPTS)]
    assert asyncio.run(both()) == pytest.approx(expected, abs=1e-4)  # one prompt or two in a batch: float rounding
    assert counted(metrics, "thinktier_classifier_latency_seconds_count") == 2


def test_a_model_that_cannot_load_routes_without_a_score_and_is_counted() -> None:
    score = scorer(Classifier(placement="ingress", artifact="/nonexistent/difficulty.json"), None)
    assert score is not None
    metrics = ServiceMetrics(dict, dict)
    assert asyncio.run(difficulty_of(score, PROMPTS[0], 60.0, metrics)) is None
    assert counted(metrics, "thinktier_classifier_failures_total") == 1


def test_no_scorer_when_the_classifier_is_off() -> None:
    assert scorer(Classifier(enabled=False, placement="ingress"), None) is None
    assert scorer(Classifier(placement="deployment"), None) is None  # scoring in the deployment, and none deployed
