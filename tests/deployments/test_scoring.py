"""The Ingress's classifier call: a failing or slow classifier routes the request without a score (and says so in
/metrics) instead of failing it."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import generate_latest

from thinktier.deployments.request.decision import DifficultyScore
from thinktier.deployments.request.metrics import ServiceMetrics
from thinktier.deployments.request.scoring import difficulty_of

HARD = DifficultyScore(0.9, {"easy": 0.0, "medium": 0.1, "hard": 0.9}, "test")


class Classifier:
    """A fake classifier handle whose `score.remote` answers, fails or hangs."""

    def __init__(self, outcome: DifficultyScore | BaseException | None) -> None:
        self.outcome = outcome
        self.score = self

    async def remote(self, prompt: str) -> Any:
        if self.outcome is None:
            await asyncio.sleep(60)
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


def _counted(metrics: ServiceMetrics, sample: str) -> float:
    line = next(ln for ln in generate_latest(metrics.registry).decode().splitlines() if ln.startswith(sample))
    return float(line.split()[-1])


def test_a_failing_classifier_routes_without_a_score_and_is_counted() -> None:
    metrics = ServiceMetrics(dict, dict)
    assert asyncio.run(difficulty_of(Classifier(RuntimeError("replica died")), "prove it", 1.0, metrics)) is None
    assert _counted(metrics, "thinktier_classifier_failures_total") == 1
    assert _counted(metrics, "thinktier_classifier_timeouts_total") == 0


def test_a_slow_classifier_is_a_timeout_and_a_working_one_gives_its_score() -> None:
    metrics = ServiceMetrics(dict, dict)
    assert asyncio.run(difficulty_of(Classifier(None), "prove it", 0.05, metrics)) is None
    assert asyncio.run(difficulty_of(Classifier(HARD), "prove it", 1.0, metrics)) == HARD
    assert _counted(metrics, "thinktier_classifier_timeouts_total") == 1
    assert _counted(metrics, "thinktier_classifier_failures_total") == 0
    assert _counted(metrics, 'thinktier_classifier_decisions_total{difficulty="hard"') == 1
