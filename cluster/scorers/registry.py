"""The scorers by name: the names are the keys of a tier's `router_weights` in the policy.

A new scorer is a module beside this one, a line in `SCORERS`, and a weight of the same name in the policy's
`RouterWeights` (with its default and help text, since the policy is the one home of every setting).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from types import MappingProxyType

from thinktier.cluster.scorers import kv_headroom, long_running, queue, stragglers
from thinktier.cluster.scorers.candidate import Candidate, Scorer
from thinktier.policies.schema import RouterWeights

SCORERS: Mapping[str, Scorer] = MappingProxyType({
    "queue": queue.score,
    "kv": kv_headroom.score,
    "straggler": stragglers.score,
    "long_running": long_running.score,
})


def scorer(name: str) -> Scorer:
    """The scorer registered as `name`; an unknown name is refused with the known ones."""
    try:
        return SCORERS[name]
    except KeyError:
        raise KeyError(f"no replica scorer named {name!r}; the scorers are {', '.join(sorted(SCORERS))}") from None


@cache
def weighted_scorers(weights: RouterWeights) -> tuple[tuple[float, Scorer], ...]:
    """Each scorer the weights name, with its weight, in the policy's order (cached: the router scores every replica
    for every request with the same weights)."""
    return tuple((weight, scorer(name)) for name, weight in weights.model_dump().items())


def total_score(candidate: Candidate, weights: RouterWeights) -> float:
    """The sum of weight x scorer over the scorers the weights name; lower is better."""
    total = 0.0
    for weight, score in weighted_scorers(weights):
        total += weight * score(candidate)
    return total
