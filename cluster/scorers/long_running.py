"""Scorer `long_running`: for a hard request, the long (hard-class) requests already on the replica.

A hard request placed beside other long ones makes all of them contend for the same KV for minutes; an easy request
is gone before that matters, so it scores 0 here.
"""

from __future__ import annotations

from thinktier.cluster.scorers.candidate import Candidate


def score(candidate: Candidate) -> float:
    return float(candidate.stats.num_long_running) if candidate.hard else 0.0
