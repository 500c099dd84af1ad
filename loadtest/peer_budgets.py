"""thinktier's per-class budgets for a peer that has no classifier: each prompt is scored by the policy's classifier
before the load starts and given the budget thinktier's routing would give it on an idle cluster, sent through vLLM's
own request fields (`thinking_token_budget`, and thinking + answer as `max_tokens`). Scoring ahead of the load gives
the peer the classifier for free: its best case."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace

from thinktier.deployments.request.decision import DifficultyScore, RoutingRequest
from thinktier.deployments.request.routing import decide
from thinktier.loadtest.client import RequestOptions
from thinktier.loadtest.workload import Prompt
from thinktier.policies.schema import Policy

SCORE_BATCH = 64


def scores(policy: Policy, texts: Sequence[str]) -> list[DifficultyScore | None]:
    """The policy's classifier's score of each text; None for each when the classifier is off."""
    classifier = policy.routing.classifier
    if not classifier.enabled:
        return [None] * len(texts)
    from thinktier.deployments.classifier.difficulty import DifficultyModel  # lazily: torch and transformers

    model = DifficultyModel.load(classifier.artifact)
    scored: list[DifficultyScore | None] = []
    for start in range(0, len(texts), SCORE_BATCH):
        scored.extend(model.score_batch(list(texts[start:start + SCORE_BATCH])))
    return scored


def per_class_options(policy: Policy, prompts: Iterable[Prompt], base: RequestOptions) -> dict[str, RequestOptions]:
    """`base` with each prompt's budget under `policy` (by prompt id)."""
    unique = list({p.id: p for p in prompts}.values())
    options = {}
    for prompt, difficulty in zip(unique, scores(policy, [p.text for p in unique]), strict=True):
        decision = decide(policy, RoutingRequest(prompt.text), difficulty, {})
        options[prompt.id] = replace(
            base,
            max_tokens=decision.thinking_tokens + decision.answer_tokens,
            thinking_token_budget=decision.thinking_tokens,
        )
    return options
