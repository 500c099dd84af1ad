"""Scorer `straggler`: the replica's stragglers, which hold KV and a batch slot long after their peers finished."""

from __future__ import annotations

from thinktier.cluster.scorers.candidate import Candidate


def score(candidate: Candidate) -> float:
    return float(candidate.stats.num_stragglers)
