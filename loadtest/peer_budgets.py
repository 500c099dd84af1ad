"""thinktier's per-class budgets for a peer that has no classifier: each prompt is scored by the policy's classifier
before the load starts and given the budget thinktier's routing would give it on an idle cluster, sent through vLLM's
own request fields (`thinking_token_budget`, and thinking + answer as `max_tokens`). Scoring ahead of the load gives
the peer the classifier for free: its best case."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from thinktier.deployments.request.decision import RoutingRequest
from thinktier.deployments.request.routing import decide
from thinktier.loadtest.client import RequestOptions
from thinktier.loadtest.sim.sim_workload import classifier_scores
from thinktier.loadtest.workload import Prompt
from thinktier.policies.schema import Policy


def per_class_options(policy: Policy, prompts: Iterable[Prompt], base: RequestOptions) -> dict[str, RequestOptions]:
    """`base` with each prompt's budget under `policy` (by prompt id)."""
    unique = list({p.id: p for p in prompts}.values())
    classifier = policy.routing.classifier
    scores = classifier_scores(classifier.artifact, unique) if classifier.enabled else {}
    options = {}
    for prompt in unique:
        decision = decide(policy, RoutingRequest(prompt.text), scores.get(prompt.id), {})
        options[prompt.id] = replace(
            base,
            max_tokens=decision.thinking_tokens + decision.answer_tokens,
            thinking_token_budget=decision.thinking_tokens,
        )
    return options
