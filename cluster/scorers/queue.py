"""Scorer `queue`: the requests the replica already holds.

Engine stats arrive every `request_routing_stats_period_s`, so between two reports every replica looks the same on the
other scorers; the queue length, which the router updates as it sends, is what spreads a burst instead of piling it
onto the replica that looked best.
"""

from __future__ import annotations

from thinktier.cluster.scorers.candidate import Candidate


def score(candidate: Candidate) -> float:
    return float(candidate.queue_len)
